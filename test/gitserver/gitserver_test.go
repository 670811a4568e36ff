package gitserver

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServesCloneAndPushWithBasicAuth: a repository seeded from a
// ConfigMap-like directory (files behind ..data symbolic links) is cloned
// and pushed to with the right credentials; wrong ones are refused.
func TestServesCloneAndPushWithBasicAuth(t *testing.T) {
	ctx := t.Context()
	backend, err := Backend(ctx)
	if err != nil {
		t.Skipf("no git http-backend: %v", err)
	}
	seed := t.TempDir()
	data := filepath.Join(seed, "..2026_data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "a.txt"), []byte("seeded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_data", filepath.Join(seed, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/a.txt", filepath.Join(seed, "a.txt")); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := CreateRepo(ctx, root, "demo", seed); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(root, backend, "u", "p"))
	defer srv.Close()
	git := func(dir string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(),
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	base := strings.Replace(srv.URL, "http://", "http://u:%s@", 1) + "/demo.git"
	work := t.TempDir()
	if out, err := git(work, "clone", "-q", strings.Replace(base, "%s", "wrong", 1), "bad"); err == nil {
		t.Fatalf("cloned with a wrong password: %s", out)
	}
	if out, err := git(work, "clone", "-q", strings.Replace(base, "%s", "p", 1), "c"); err != nil {
		t.Fatalf("clone: %v: %s", err, out)
	}
	c := filepath.Join(work, "c")
	if got, err := os.ReadFile(filepath.Join(c, "a.txt")); err != nil || string(got) != "seeded\n" {
		t.Fatalf("a.txt = %q (%v)", got, err)
	}
	if _, err := os.Stat(filepath.Join(c, "..data")); !os.IsNotExist(err) {
		t.Fatalf("the volume's ..data entry was committed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(c, "b.txt"), []byte("pushed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "b"}, {"push", "-q", "origin", "HEAD:refs/heads/topic"}} {
		if out, err := git(c, args...); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	if out, err := git(filepath.Join(root, "demo.git"), "show", "topic:b.txt"); err != nil || out != "pushed\n" {
		t.Fatalf("pushed file on the server: %q (%v)", out, err)
	}
}
