// Package gitserver serves bare git repositories over git's smart HTTP
// protocol with Debian's git http-backend behind net/http/cgi, with basic
// authentication: a real git server for tests (the changes package's tests
// and, as cmd/gitserver in the workspace image, the e2e suite).
package gitserver

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Backend returns the path of git http-backend.
func Backend(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git --exec-path: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("git http-backend: %w", err)
	}
	return p, nil
}

// Handler serves the bare repositories under root (GIT_PROJECT_ROOT) for
// fetch and push. With user set, every request must carry that user and
// password (basic auth); others get 401.
func Handler(root, backend, user, password string) http.Handler {
	cgiH := &cgi.Handler{
		Path: backend,
		Root: "/",
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			// Pushing over http-backend needs http.receivepack (or REMOTE_USER).
			"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.receivepack", "GIT_CONFIG_VALUE_0=true",
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		cgiH.ServeHTTP(w, r)
	})
}

// CreateRepo makes the bare repository root/name.git whose main branch has
// one commit of the files under seed (none when seed is empty).
func CreateRepo(ctx context.Context, root, name, seed string) error {
	bare := filepath.Join(root, name+".git")
	work, err := os.MkdirTemp("", "gitserver-seed-")
	if err != nil {
		return fmt.Errorf("create repo %s: %w", name, err)
	}
	defer os.RemoveAll(work)
	if seed != "" {
		if err := copySeed(seed, work); err != nil {
			return fmt.Errorf("create repo %s: copy seed: %w", name, err)
		}
	}
	env := append(os.Environ(), "GIT_AUTHOR_NAME=seed", "GIT_AUTHOR_EMAIL=seed@localhost",
		"GIT_COMMITTER_NAME=seed", "GIT_COMMITTER_EMAIL=seed@localhost", "GIT_CONFIG_NOSYSTEM=1")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"-C", work, "init", "-q", "-b", "main"},
		{"-C", work, "add", "-A"},
		{"-C", work, "commit", "-q", "--allow-empty", "-m", "seed"},
		{"-C", work, "push", "-q", bare, "main"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("create repo %s: git %s: %w: %s", name, strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// copySeed copies the regular files under seed (following symbolic links,
// as a ConfigMap volume has them) into dst, skipping the volume's ".."
// entries.
func copySeed(seed, dst string) error {
	return filepath.WalkDir(seed, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == seed {
			return nil
		}
		if strings.HasPrefix(d.Name(), "..") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(seed, p)
		if err != nil {
			return err
		}
		st, err := os.Stat(p) // follows the ConfigMap's symbolic links
		if err != nil {
			return err
		}
		if st.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
}
