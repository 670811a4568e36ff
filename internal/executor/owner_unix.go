//go:build unix

package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// checkOwnerRecord runs one check of o against its session's record in dir,
// under the session's lock. Every failure refuses the call: the workload
// (same uid as the executor) can write dir, so whatever it puts there may
// stop its own session, and nothing more. Files are opened relative to the
// directory without following symbolic links, read with a size cap, and
// written through a fresh temporary file renamed over the record.
func checkOwnerRecord(ctx context.Context, dir string, o Owner) error {
	unusable := func(err error) error { return &unusableRecordError{uid: o.SessionUID, err: err} }
	dfd, err := openOwnerDir(dir)
	if err != nil {
		return unusable(err)
	}
	defer unix.Close(dfd)
	unlock, err := lockOwnerRecord(ctx, dfd, o.SessionUID)
	if err != nil {
		return unusable(err)
	}
	defer unlock()
	rec, err := readOwnerRecord(dfd, o.SessionUID)
	if err != nil {
		return unusable(err)
	}
	next, err := decide(o, rec)
	if err != nil || next == nil {
		return err
	}
	if err := writeOwnerRecord(dfd, o.SessionUID, next); err != nil {
		return unusable(err)
	}
	return nil
}

// openOwnerDir opens dir (creating it 0700 when missing) and checks that it
// is a directory of this user that nobody else can write to.
func openOwnerDir(dir string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Open(dir, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		if merr := os.MkdirAll(dir, 0o700); merr != nil {
			return -1, fmt.Errorf("create owner directory: %w", merr)
		}
		fd, err = unix.Open(dir, flags, 0)
	}
	if err != nil {
		if st, lerr := os.Lstat(dir); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			return -1, fmt.Errorf("owner directory %s is a symbolic link", dir)
		}
		return -1, fmt.Errorf("open owner directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat owner directory %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("owner directory %s: owned by uid %d with mode %#o, want uid %d and no group or other write",
			dir, st.Uid, st.Mode&0o777, os.Geteuid())
	}
	return fd, nil
}

// openRegular opens name in dfd without following a symbolic link and
// checks that it is a regular file.
func openRegular(dfd int, name string, flags int, perm uint32) (int, error) {
	fd, err := unix.Openat(dfd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s is a symbolic link", name)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("stat %s: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fmt.Errorf("%s is not a regular file (mode %#o)", name, st.Mode)
	}
	if st.Size > maxOwnerRecord {
		unix.Close(fd)
		return -1, fmt.Errorf("%s has %d bytes, an owner record has at most %d", name, st.Size, maxOwnerRecord)
	}
	return fd, nil
}

// lockOwnerRecord takes the session's lock (flock on "<uid>.lock"), polling
// for up to ownerLockTimeout: a process holding it forever fails the
// session's calls instead of hanging them. Callers of this process queue for
// it in the process first (inProcess), so only another process makes a call
// poll: the calls a stream runs at once (a session's start gathers its
// prompt context with several) each waited a poll interval for the one
// before.
func lockOwnerRecord(ctx context.Context, dfd int, uid string) (func(), error) {
	fd, err := openRegular(dfd, uid+".lock", unix.O_RDWR|unix.O_CREAT, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	deadline := time.Now().Add(ownerLockTimeout)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock %s.lock: %w", uid, err)
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	leave, err := inProcess.lock(wctx, lockFile{dev: uint64(st.Dev), ino: uint64(st.Ino)})
	cancel()
	if err != nil {
		unix.Close(fd)
		if ctx.Err() == nil {
			err = fmt.Errorf("still held by a call of this process after %s", ownerLockTimeout)
		}
		return nil, fmt.Errorf("lock %s.lock: %w", uid, err)
	}
	held := false
	defer func() {
		if !held {
			unix.Close(fd)
			leave()
		}
	}()
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			held = true
			return func() { unix.Close(fd); leave() }, nil // closing releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("lock %s.lock: %w", uid, err)
		}
		lockPolls.Add(1)
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("lock %s.lock: still held by another process after %s", uid, ownerLockTimeout)
		}
		t := time.NewTimer(ownerLockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lock %s.lock: %w", uid, ctx.Err())
		case <-t.C:
		}
	}
}

// lockPolls counts the waits of lockOwnerRecord for a lock another holder
// had (tests read it).
var lockPolls atomic.Int64

// lockFile is a lock file's identity.
type lockFile struct{ dev, ino uint64 }

// inProcess queues this process's holders of each lock file.
var inProcess keyLocks[lockFile]

// readOwnerRecord reads the session's record; nil when there is none.
func readOwnerRecord(dfd int, uid string) (*ownerRecord, error) {
	fd, err := openRegular(dfd, uid, unix.O_RDONLY, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), uid)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxOwnerRecord+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", uid, err)
	}
	if len(b) > maxOwnerRecord {
		return nil, fmt.Errorf("%s has more than %d bytes", uid, maxOwnerRecord)
	}
	rec, err := parseOwnerRecord(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", uid, err)
	}
	return rec, nil
}

// writeOwnerRecord replaces the session's record atomically: a new file
// (O_EXCL, so nothing planted at its name is followed or reused) renamed
// over the record (which replaces a symbolic link rather than following it).
func writeOwnerRecord(dfd int, uid string, rec *ownerRecord) error {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return fmt.Errorf("write %s: %w", uid, err)
	}
	tmp := uid + ".tmp-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, uid)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %s: %w", uid, err)
	}
	return nil
}
