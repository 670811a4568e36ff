//go:build unix

package executor

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCallsOfOneProcessQueueForTheOwnerLock: a call that finds its
// session's lock held by another call of the same process waits its turn
// and gets the lock as soon as it is released, without polling the file
// lock (a poll interval per call it waited behind: the calls a session's
// start makes at once waited 5 ms each); no queue entry stays behind.
func TestCallsOfOneProcessQueueForTheOwnerLock(t *testing.T) {
	dfd, err := openOwnerDir(filepath.Join(t.TempDir(), "owners"))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	before := lockPolls.Load()
	unlock, err := lockOwnerRecord(t.Context(), dfd, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		leave, err := lockOwnerRecord(t.Context(), dfd, "uid-1")
		if err == nil {
			leave()
		}
		got <- err
	}()
	// A window for the second call to poll: a file lock alone fails its
	// first try at once, and that counts.
	for wait := time.Now().Add(200 * time.Millisecond); lockPolls.Load() == before && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatalf("second call: %v", err)
	}
	if n := lockPolls.Load() - before; n != 0 {
		t.Errorf("the second call polled the file lock %d times while a call of its own process held it", n)
	}
	inProcess.mu.Lock()
	left := len(inProcess.locks)
	inProcess.mu.Unlock()
	if left != 0 {
		t.Errorf("%d queue entries left after both calls ended", left)
	}
}
