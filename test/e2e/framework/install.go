package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldOwner is the server-side apply field manager of everything the suite applies.
const FieldOwner = "agent-operator-e2e"

// InstallOperator is THE HOOK for installing the operator before the suite runs.
//
// Today it applies the CRDs in config/crd/bases (if that directory exists) with server-side
// apply and reports which files it applied; with no CRDs yet it does nothing. Deploying the
// manager itself (config/ manifests or the Helm chart in charts/, with the images from
// `make images`) belongs here too, once those exist.
func (f *Framework) InstallOperator(ctx context.Context) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "config", "crd", "bases")
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list CRDs: %w", err)
	}
	sort.Strings(files)
	for _, file := range files {
		if err := f.ApplyFile(ctx, file); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// ApplyFile server-side applies every object of a (multi-document) YAML or JSON file.
func (f *Framework) ApplyFile(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("decode %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := f.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// RepoRoot finds the repository root (the directory holding go.mod) from the working
// directory, which is the package directory under `go test`.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod above the working directory")
		}
		dir = parent
	}
}
