package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// ownedClient opens a stream of a new serve process sharing the owner
// directory dir and presenting o (none when zero). It returns the client or
// the handshake's error.
func ownedClient(t *testing.T, dir string, o Owner) (*Client, error) {
	t.Helper()
	s := serve(t, ServeOptions{OwnerDir: dir})
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	c, err := NewClientContext(ctx, s.client, WithOwner(o))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// record reads the owner record of uid in dir.
func record(t *testing.T, dir, uid string) ownerRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, uid))
	if err != nil {
		t.Fatalf("read owner record: %v", err)
	}
	rec, err := parseOwnerRecord(b)
	if err != nil {
		t.Fatalf("owner record %q: %v", b, err)
	}
	return *rec
}

// works makes one call and reports its error.
func works(c *Client) error {
	_, err := c.FileExists(context.Background(), ".")
	return err
}

func TestOwnerRecordsRefuseSupersededDrivers(t *testing.T) {
	a5 := Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 5}
	tests := []struct {
		name   string
		second Owner
		refuse bool
		want   ownerRecord // the record after both streams
	}{
		{"older epoch refused", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 4}, true, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"older epoch of the same holder refused", Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 3}, true, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"same epoch, another holder refused", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 5}, true, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"same holder and epoch accepted (a reconnect)", a5, false, ownerRecord{"ns-a/ao/ao-1", 5}},
		{"newer epoch accepted and recorded", Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 6}, false, ownerRecord{"ns-b/ao/ao-9", 6}},
		{"another session is independent", Owner{SessionUID: "s-2", Holder: "ns-b/ao/ao-9", Epoch: 0}, false, ownerRecord{"ns-a/ao/ao-1", 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners") // created by the first check
			first, err := ownedClient(t, dir, a5)
			if err != nil {
				t.Fatalf("first driver: %v", err)
			}
			if err := works(first); err != nil {
				t.Fatalf("first driver's call: %v", err)
			}
			_, err = ownedClient(t, dir, tt.second)
			if tt.refuse {
				var re *RemoteError
				if !errors.Is(err, ErrNotOwner) || !errors.As(err, &re) || re.Owner == nil || *re.Owner != a5 {
					t.Fatalf("second driver's hello = %v, want ErrNotOwner naming %+v", err, a5)
				}
				if !strings.Contains(err.Error(), `"ns-a/ao/ao-1" at epoch 5`) {
					t.Errorf("refusal %q does not name the current driver", err)
				}
			} else if err != nil {
				t.Fatalf("second driver's hello = %v, want accepted", err)
			}
			if got := record(t, dir, "s-1"); got != tt.want {
				t.Errorf("record of s-1 = %+v, want %+v", got, tt.want)
			}
			if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("owner directory: %v, %v; want mode 0700", st.Mode(), err)
			}
		})
	}
}

// A newer driver takes over while the old one's stream is still open: the
// old stream's next call is refused, the new one goes on, and the old
// stream's refusal never lowers the record.
func TestTakeoverRefusesTheOldStreamsNextCall(t *testing.T) {
	dir := t.TempDir()
	old := Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 2}
	newer := Owner{SessionUID: "s-1", Holder: "ns-b/ao/ao-9", Epoch: 3}
	oc, err := ownedClient(t, dir, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := works(oc); err != nil {
		t.Fatalf("old driver before the takeover: %v", err)
	}
	nc, err := ownedClient(t, dir, newer)
	if err != nil {
		t.Fatalf("newer driver: %v", err)
	}
	if err := works(nc); err != nil {
		t.Fatalf("newer driver: %v", err)
	}
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"file_exists", func() error { return works(oc) }},
		{"write_file", func() error { return oc.WriteFile(t.Context(), "stale.txt", []byte("x")) }},
		{"exec", func() error {
			_, err := oc.ExecCommand(t.Context(), "touch stale-exec", tool.ExecOptions{})
			return err
		}},
	} {
		err := call.do()
		var re *RemoteError
		if !errors.Is(err, ErrNotOwner) || !errors.As(err, &re) || re.Owner == nil || *re.Owner != newer {
			t.Errorf("old driver's %s after the takeover = %v, want ErrNotOwner naming %+v", call.name, err, newer)
		}
	}
	if oc.Err() != nil {
		t.Errorf("the old stream broke (%v); only its calls are refused", oc.Err())
	}
	if err := works(nc); err != nil {
		t.Errorf("newer driver after the old one was refused: %v", err)
	}
	if got := record(t, dir, "s-1"); got != (ownerRecord{newer.Holder, newer.Epoch}) {
		t.Errorf("record = %+v, want the newer driver's", got)
	}
}

// Streams without an owner are not checked and touch no owner record.
func TestStreamWithoutOwnerIsUnchecked(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "s-1"), []byte(`{"holder":"x/y","epoch":9223372036854775807}`), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "never-created")
	for _, d := range []string{dir, missing} {
		c, err := ownedClient(t, d, Owner{})
		if err != nil {
			t.Fatalf("hello without an owner: %v", err)
		}
		if err := works(c); err != nil {
			t.Errorf("call without an owner: %v", err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stream without an owner created the owner directory (%v)", err)
	}
}

// Whatever the workload (same uid) puts in the owner directory stops its own
// session's driver with ErrNotOwner and a clear message, without hanging or
// following links; another session's driver in the same pod is unaffected,
// and removing the tampering lets the session be driven again.
func TestHostileOwnerRecordStopsOnlyItsOwnSession(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	const outsideContent = "not an owner record\n"
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string) // on session s-1's files
		want   string                         // in the refusal
	}{
		{"garbage", func(t *testing.T, dir string) { write(t, filepath.Join(dir, "s-1"), "\x00\xffgarbage{{{") }, "unusable"},
		{"valid JSON, not a record", func(t *testing.T, dir string) { write(t, filepath.Join(dir, "s-1"), `{"epoch":-4}`) }, "not an owner record"},
		{"huge file", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "s-1"), "")
			if err := os.Truncate(filepath.Join(dir, "s-1"), 1<<30); err != nil {
				t.Fatal(err)
			}
		}, "at most 4096"},
		{"symbolic link to a file outside", func(t *testing.T, dir string) { symlink(t, outside, filepath.Join(dir, "s-1")) }, "symbolic link"},
		{"symbolic link to /dev/zero", func(t *testing.T, dir string) { symlink(t, "/dev/zero", filepath.Join(dir, "s-1")) }, "symbolic link"},
		{"lock file is a symbolic link", func(t *testing.T, dir string) { symlink(t, outside, filepath.Join(dir, "s-1.lock")) }, "symbolic link"},
		{"FIFO", func(t *testing.T, dir string) {
			replace(t, filepath.Join(dir, "s-1"))
			if err := unix.Mkfifo(filepath.Join(dir, "s-1"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"directory", func(t *testing.T, dir string) {
			replace(t, filepath.Join(dir, "s-1"))
			if err := os.Mkdir(filepath.Join(dir, "s-1"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"far-future epoch with escape bytes in the holder", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "s-1"), `{"holder":"evil\u001b[2J\r\n","epoch":9223372036854775807}`)
		}, `"evil\x1b[2J\r\n" at epoch 9223372036854775807`},
		{"lock held forever", func(t *testing.T, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, "s-1.lock"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
		}, "still held"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write(t, outside, outsideContent)
			dir := t.TempDir()
			mine := Owner{SessionUID: "s-1", Holder: "ns-a/ao/ao-1", Epoch: 7}
			c, err := ownedClient(t, dir, mine)
			if err != nil {
				t.Fatalf("before the tampering: %v", err)
			}
			tt.tamper(t, dir)

			// The stream open before the tampering: its next call is refused.
			err = works(c)
			if !errors.Is(err, ErrNotOwner) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("call after the tampering = %v, want ErrNotOwner mentioning %q", err, tt.want)
			}
			if err != nil && strings.ContainsAny(err.Error(), "\x1b\r\n") {
				t.Errorf("the refusal carries raw control bytes: %q", err)
			}
			// A new stream of the same session, even of a newer epoch, is refused at its hello.
			newer := mine
			newer.Epoch++
			if _, err := ownedClient(t, dir, newer); !errors.Is(err, ErrNotOwner) {
				t.Errorf("new stream after the tampering = %v, want ErrNotOwner", err)
			}
			// Another session in the same pod is driven as before.
			other, err := ownedClient(t, dir, Owner{SessionUID: "s-2", Holder: "ns-a/ao/ao-1", Epoch: 1})
			if err != nil {
				t.Fatalf("another session's stream: %v", err)
			}
			if err := works(other); err != nil {
				t.Errorf("another session's call: %v", err)
			}
			// Nothing was written through a link.
			if b, err := os.ReadFile(outside); err != nil || string(b) != outsideContent {
				t.Errorf("the file outside is now %q (%v)", b, err)
			}
			// The stream survived, and works again once the tampering is gone.
			if c.Err() != nil {
				t.Fatalf("the stream broke: %v", c.Err())
			}
			if tt.name == "lock held forever" {
				return // the holder goes away with the test
			}
			for _, name := range []string{"s-1", "s-1.lock"} {
				if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			if err := works(c); err != nil {
				t.Errorf("call once the tampering is gone: %v", err)
			}
		})
	}
}

// An owner directory that is a symbolic link, or writable by others, is
// refused rather than used.
func TestOwnerDirectoryMustBeOurs(t *testing.T) {
	tests := []struct {
		name string
		dir  func(t *testing.T) string
		want string
	}{
		{"symbolic link", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "link")
			symlink(t, t.TempDir(), d)
			return d
		}, "is a symbolic link"},
		{"world-writable", func(t *testing.T) string {
			d := t.TempDir()
			if err := os.Chmod(d, 0o777); err != nil {
				t.Fatal(err)
			}
			return d
		}, "no group or other write"},
		{"a file", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "file")
			write(t, d, "")
			return d
		}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ownedClient(t, tt.dir(t), Owner{SessionUID: "s-1", Holder: "h/p", Epoch: 1})
			if !errors.Is(err, ErrNotOwner) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("hello = %v, want ErrNotOwner mentioning %q", err, tt.want)
			}
		})
	}
}

// Concurrent streams of one session with different epochs leave the
// highest epoch recorded: the record never goes back.
func TestOwnerRecordNeverLowersTheEpoch(t *testing.T) {
	dir := t.TempDir()
	const n = 12
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Every epoch but the highest may be refused, depending on the order.
			if c, err := ownedClient(t, dir, Owner{SessionUID: "s-1", Holder: fmt.Sprintf("i/p-%d", i), Epoch: int64(i)}); err == nil {
				_ = works(c)
			}
		})
	}
	wg.Wait()
	if got := record(t, dir, "s-1"); got != (ownerRecord{fmt.Sprintf("i/p-%d", n-1), n - 1}) {
		t.Errorf("record = %+v, want epoch %d", got, n-1)
	}
}

func TestOwnerValidate(t *testing.T) {
	tests := []struct {
		name  string
		owner Owner
		want  string // "" = valid
	}{
		{"valid", Owner{SessionUID: "0b1c-9F_x", Holder: "ns/ao/ao-1", Epoch: 0}, ""},
		{"path in the UID", Owner{SessionUID: "../etc", Holder: "h", Epoch: 1}, "only letters"},
		{"slash in the UID", Owner{SessionUID: "a/b", Holder: "h", Epoch: 1}, "only letters"},
		{"empty UID", Owner{Holder: "h", Epoch: 1}, "session UID"},
		{"long UID", Owner{SessionUID: strings.Repeat("a", 129), Holder: "h"}, "session UID"},
		{"no holder", Owner{SessionUID: "a", Epoch: 1}, "holder"},
		{"long holder", Owner{SessionUID: "a", Holder: strings.Repeat("h", 257)}, "holder"},
		{"negative epoch", Owner{SessionUID: "a", Holder: "h", Epoch: -1}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.owner.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	// The server refuses an invalid owner in a raw hello, too.
	s := serve(t, ServeOptions{OwnerDir: t.TempDir()})
	rc := &rawConn{t: t, w: s.client, r: s.client}
	rc.sendBody(string(mustJSON(Frame{Kind: KindHello, Body: mustJSON(clientHello{Hello: Hello{Version: Version},
		Key: make([]byte, KeySize), Owner: &Owner{SessionUID: "../x", Holder: "h", Epoch: 1}})})))
	if f := rc.recv(); f.Kind != KindError || f.Error.Code != CodeBadRequest || !strings.Contains(f.Error.Message, "only letters") {
		t.Errorf("hello with an invalid owner answered %+v", f)
	}
}

// replace removes path (the workload replacing a file).
func replace(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// symlink replaces path with a symbolic link to target.
func symlink(t *testing.T, target, path string) {
	t.Helper()
	replace(t, path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}
