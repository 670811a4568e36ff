// Command images builds the project's container images without Docker or a registry.
//
// Every image is assembled with go-containerregistry from statically linked Go binaries
// (CGO_ENABLED=0) or, for the workspace image, from a root filesystem tarball. Each image is
// written twice under -out:
//
//	<name>.tar        docker-archive tarball: `ctr images import`, `kind load image-archive`, `docker load`
//	oci/<name>/       OCI image layout: push with `crane push --index`, `skopeo copy oci:...`, `oras`
//
// Images whose source package does not exist yet are skipped with a message.
//
// Usage:
//
//	go run ./hack/images -out _output/images -workspace-rootfs rootfs.tar.gz [-images manager,pause]
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const nonRoot = "65532:65532"

// binary is a Go main package compiled into an image.
type binary struct {
	pkg  string // package path relative to the repository root, e.g. ./cmd/manager
	path string // absolute path inside the image
}

// spec describes one image.
type spec struct {
	name      string   // short name, e.g. manager; the image is <repo>/<name>:<tag>
	binaries  []binary // the first one is the entrypoint
	required  []string // packages that must exist, or the image is skipped
	user      string
	caCerts   bool     // add the host's CA bundle (for TLS clients such as LLM SDKs)
	workspace bool     // root filesystem from -workspace-rootfs instead of binaries
	busybox   bool     // a busybox userland from -busybox instead of binaries
	cmd       []string // default arguments of the entrypoint (the image's Cmd)
	// onWorkspace puts the binaries on top of the workspace image's root
	// filesystem (for test servers that need its userland, e.g. git).
	onWorkspace bool
}

var specs = []spec{
	{
		name: "manager",
		binaries: []binary{
			{pkg: "./cmd/manager", path: "/manager"},
			{pkg: "./cmd/executor-sidecar", path: "/executor-sidecar"},
		},
		required: []string{"./cmd/manager"},
		user:     nonRoot,
		caCerts:  true,
	},
	{
		name:     "executor",
		binaries: []binary{{pkg: "./cmd/executor-sidecar", path: "/executor-sidecar"}},
		required: []string{"./cmd/executor-sidecar"},
	},
	{
		name:     "llmserver",
		binaries: []binary{{pkg: "./test/llmserver", path: "/llmserver"}},
		required: []string{"./test/llmserver"},
		user:     nonRoot,
	},
	{name: "workspace", workspace: true},
	// A git server for the e2e suite: git http-backend behind net/http/cgi, with the
	// workspace image's git (test/gitserver).
	{
		name:        "gitserver",
		binaries:    []binary{{pkg: "./test/gitserver/cmd/gitserver", path: "/gitserver"}},
		required:    []string{"./test/gitserver/cmd/gitserver"},
		user:        nonRoot,
		onWorkspace: true,
	},
	// A test MCP server built with the official Go SDK (test/mcpserver), on the workspace
	// image's userland: the e2e suite runs it as an in-cluster Service (the default,
	// streamable HTTP on :8080/mcp) and, as a session's workspace image, as a stdio MCP
	// server run by the executor (command ["/mcpserver", "-stdio"]).
	{
		name:        "mcpserver",
		binaries:    []binary{{pkg: "./test/mcpserver", path: "/mcpserver"}},
		required:    []string{"./test/mcpserver"},
		user:        nonRoot,
		cmd:         []string{"-addr=:8080"},
		onWorkspace: true,
	},
	// A plain userland without an executor: pods of this image get the
	// executor from an init container (the e2e "plain image" case).
	{name: "busybox", busybox: true},
	{
		name:     "pause",
		binaries: []binary{{pkg: "./hack/pause", path: "/pause"}},
		required: []string{"./hack/pause"},
	},
	// A NATS server with JetStream, built from the nats-server module pinned in go.mod, for
	// the e2e specs that run the operator with nats.mode=external (and restart the server).
	// The store is /data (mount a volume there); 8222 serves /healthz for probes.
	{
		name:     "nats",
		binaries: []binary{{pkg: "github.com/nats-io/nats-server/v2", path: "/nats-server"}},
		required: []string{"github.com/nats-io/nats-server/v2"},
		user:     nonRoot,
		cmd:      []string{"--jetstream", "--store_dir=/data", "--http_port=8222"},
	},
}

type options struct {
	out             string
	repo            string
	tag             string
	only            []string
	workspaceRootfs string
	busybox         string
	plainBusybox    string
	quiet           bool
}

func main() {
	var o options
	var only string
	flag.StringVar(&o.out, "out", "_output/images", "output directory for the tarballs and OCI layouts")
	flag.StringVar(&o.repo, "repo", "agent-operator", "image repository prefix")
	flag.StringVar(&o.tag, "tag", "dev", "image tag")
	flag.StringVar(&only, "images", "", "comma-separated images to build (default: all of "+strings.Join(names(), ",")+")")
	flag.StringVar(&o.workspaceRootfs, "workspace-rootfs", "", "root filesystem tarball (optionally gzipped) for the workspace image")
	flag.StringVar(&o.busybox, "workspace-busybox", "", "fallback: a static busybox binary to build the workspace image from when no rootfs is given")
	flag.StringVar(&o.plainBusybox, "busybox", "", "a static busybox binary (Debian's busybox-static) for the busybox image")
	flag.BoolVar(&o.quiet, "quiet", false, "print only errors and skips")
	flag.Parse()
	if only != "" {
		o.only = strings.Split(only, ",")
		for _, n := range o.only {
			if !slices.Contains(names(), n) {
				log.Fatalf("unknown image %q (known: %s)", n, strings.Join(names(), ", "))
			}
		}
	}
	if err := run(context.Background(), o); err != nil {
		log.Fatalf("images: %v", err)
	}
}

func names() []string {
	var n []string
	for _, s := range specs {
		n = append(n, s.name)
	}
	return n
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("create output dir: %w", err)
	}
	binDir, err := os.MkdirTemp("", "agent-operator-images-")
	if err != nil {
		return fmt.Errorf("create build dir: %w", err)
	}
	defer os.RemoveAll(binDir)

	for _, s := range specs {
		if len(o.only) > 0 && !slices.Contains(o.only, s.name) {
			continue
		}
		ref := fmt.Sprintf("%s/%s:%s", o.repo, s.name, o.tag)
		start := time.Now()
		img, skip, err := build(ctx, o, s, binDir)
		if err != nil {
			return fmt.Errorf("build %s: %w", ref, err)
		}
		if skip != "" {
			fmt.Printf("SKIP %-40s %s\n", ref, skip)
			continue
		}
		if err := write(o, s.name, ref, img); err != nil {
			return fmt.Errorf("write %s: %w", ref, err)
		}
		if !o.quiet {
			digest, _ := img.Digest()
			fmt.Printf("OK   %-40s %s %s (%s)\n", ref, filepath.Join(o.out, s.name+".tar"), digest.Hex[:12], time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// build returns the image, or a reason to skip it.
func build(ctx context.Context, o options, s spec, binDir string) (v1.Image, string, error) {
	if s.workspace {
		return buildWorkspace(o)
	}
	if s.busybox {
		return buildBusybox(o)
	}
	for _, pkg := range s.required {
		if reason := missingMain(ctx, pkg); reason != "" {
			return nil, reason, nil
		}
	}
	files := map[string]file{}
	for _, b := range s.binaries {
		if reason := missingMain(ctx, b.pkg); reason != "" {
			fmt.Printf("note: %s: leaving %s out: %s\n", s.name, b.path, reason)
			continue
		}
		out := filepath.Join(binDir, filepath.Base(b.path))
		if err := goBuild(ctx, b.pkg, out); err != nil {
			return nil, "", err
		}
		files[b.path] = file{src: out, mode: 0o755}
	}
	if s.caCerts {
		if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
			files["/etc/ssl/certs/ca-certificates.crt"] = file{src: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644}
		}
	}
	files["/tmp"] = file{dir: true, mode: 0o1777}
	layer, err := layerFromFiles(files)
	if err != nil {
		return nil, "", err
	}
	cfg := v1.Config{
		Entrypoint: []string{s.binaries[0].path},
		Cmd:        s.cmd,
		User:       s.user,
		Env:        []string{"PATH=/"},
		WorkingDir: "/",
	}
	layers := []v1.Layer{layer}
	if s.onWorkspace {
		base, reason, err := workspaceLayer(o)
		if base == nil {
			return nil, reason, err
		}
		layers = []v1.Layer{base, layer}
		cfg.Env = []string{"PATH=/:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
	}
	img, err := assemble(layers, cfg)
	return img, "", err
}

// workspaceLayer is the root filesystem layer of the workspace image, or a
// reason it cannot be built.
func workspaceLayer(o options) (v1.Layer, string, error) {
	switch {
	case o.workspaceRootfs != "":
		layer, err := tarball.LayerFromFile(o.workspaceRootfs, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, "", fmt.Errorf("read rootfs %s: %w", o.workspaceRootfs, err)
		}
		return layer, "", nil
	case o.busybox != "":
		layer, err := busyboxLayer(o.busybox)
		return layer, "", err
	default:
		return nil, "no -workspace-rootfs or -workspace-busybox given (hack/images.sh provides one)", nil
	}
}

// missingMain explains why pkg cannot be built as a command, or returns "".
// pkg is a directory of this repository (./cmd/manager) or the import path of a
// main package in a module required by go.mod (built at the version pinned there).
func missingMain(ctx context.Context, pkg string) string {
	if strings.HasPrefix(pkg, "./") {
		if _, err := os.Stat(pkg); errors.Is(err, fs.ErrNotExist) {
			return pkg + " does not exist yet"
		}
	}
	out, err := exec.CommandContext(ctx, "go", "list", "-f", "{{.Name}}", pkg).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s is not a buildable package yet: %s", pkg, firstLine(string(out)))
	}
	if n := strings.TrimSpace(string(out)); n != "main" {
		return fmt.Sprintf("%s is package %q, not main", pkg, n)
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func goBuild(ctx context.Context, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

func buildWorkspace(o options) (v1.Image, string, error) {
	cfg := v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
		Cmd:        []string{"/bin/sh"},
		WorkingDir: "/",
	}
	switch {
	case o.workspaceRootfs != "":
		layer, err := tarball.LayerFromFile(o.workspaceRootfs, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, "", fmt.Errorf("read rootfs %s: %w", o.workspaceRootfs, err)
		}
		img, err := assemble([]v1.Layer{layer}, cfg)
		return img, "", err
	case o.busybox != "":
		layer, err := busyboxLayer(o.busybox)
		if err != nil {
			return nil, "", err
		}
		img, err := assemble([]v1.Layer{layer}, cfg)
		return img, "", err
	default:
		return nil, "no -workspace-rootfs or -workspace-busybox given (hack/images.sh provides one)", nil
	}
}

// buildBusybox makes the busybox image: a static /bin/busybox, a symlink per
// applet (sh, ls, cat, ...) and nothing else; no executor.
func buildBusybox(o options) (v1.Image, string, error) {
	if o.plainBusybox == "" {
		return nil, "no -busybox given (hack/images.sh installs busybox-static and provides one)", nil
	}
	layer, err := busyboxLayer(o.plainBusybox)
	if err != nil {
		return nil, "", err
	}
	img, err := assemble([]v1.Layer{layer}, v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd:        []string{"/bin/sh"},
		WorkingDir: "/",
	})
	return img, "", err
}

// busyboxLayer makes a minimal shell userland: /bin/busybox plus a symlink per applet.
func busyboxLayer(busybox string) (v1.Layer, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	files := map[string]file{
		"/bin/busybox": {src: busybox, mode: 0o755},
		"/tmp":         {dir: true, mode: 0o1777},
		"/root":        {dir: true, mode: 0o700},
		"/etc/passwd":  {data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), mode: 0o644},
		"/etc/group":   {data: []byte("root:x:0:\nnogroup:x:65534:\n"), mode: 0o644},
	}
	for _, applet := range strings.Fields(string(out)) {
		p := "/" + applet
		if p != "/bin/busybox" {
			files[p] = file{link: "/bin/busybox"}
		}
	}
	return layerFromFiles(files)
}

func assemble(layers []v1.Layer, cfg v1.Config) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	// Reproducible: no wall-clock timestamps in the config.
	return mutate.CreatedAt(img, v1.Time{Time: time.Unix(0, 0).UTC()})
}

func write(o options, short, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("parse reference: %w", err)
	}
	tarPath := filepath.Join(o.out, short+".tar")
	tmp := tarPath + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("write tarball: %w", err)
	}
	if err := os.Rename(tmp, tarPath); err != nil {
		return fmt.Errorf("rename tarball: %w", err)
	}
	dir := filepath.Join(o.out, "oci", short)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean layout: %w", err)
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("create layout: %w", err)
	}
	return lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	}))
}

// file is one entry of a layer built from host files.
type file struct {
	src  string // host file to copy
	data []byte // or literal content
	link string // or symlink target
	dir  bool   // or a directory
	mode int64
}

// layerFromFiles feeds the given files (and their parent directories) into a single layer.
func layerFromFiles(files map[string]file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	seen := map[string]bool{}
	mtime := time.Unix(0, 0)
	var addDir func(string) error
	addDir = func(d string) error {
		if d == "/" || d == "." || seen[d] {
			return nil
		}
		if err := addDir(filepath.Dir(d)); err != nil {
			return err
		}
		seen[d] = true
		mode := int64(0o755)
		if f, ok := files[d]; ok && f.dir {
			mode = f.mode
		}
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode, ModTime: mtime})
	}
	for _, p := range paths {
		f := files[p]
		if err := addDir(filepath.Dir(p)); err != nil {
			return nil, fmt.Errorf("add parent of %s: %w", p, err)
		}
		name := strings.TrimPrefix(p, "/")
		switch {
		case f.dir:
			if err := addDir(p); err != nil {
				return nil, fmt.Errorf("add dir %s: %w", p, err)
			}
		case f.link != "":
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.link, Mode: 0o777, ModTime: mtime}); err != nil {
				return nil, fmt.Errorf("add link %s: %w", p, err)
			}
		default:
			data := f.data
			if f.src != "" {
				b, err := os.ReadFile(f.src)
				if err != nil {
					return nil, fmt.Errorf("read %s: %w", f.src, err)
				}
				data = b
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: f.mode, Size: int64(len(data)), ModTime: mtime}); err != nil {
				return nil, fmt.Errorf("add %s: %w", p, err)
			}
			if _, err := tw.Write(data); err != nil {
				return nil, fmt.Errorf("write %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
