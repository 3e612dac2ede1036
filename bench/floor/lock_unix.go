//go:build unix

package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// takeLock does the core of what an uncontended gpuexec does to take the
// lock at path, and returns what gives it back; nothing is judged, and
// nobody else may use the folder. Taking: catch SIGPIPE and the six
// signals gpuexec forwards (the Go runtime makes a round trip to its
// signal thread for each); under the guard (its file opened, created if
// missing, and locked), create and lock the liveness file, then create the
// record and write it; let go of the guard. Giving back: under the guard,
// unlock, close and remove the liveness file, read the record, rename it
// aside; let go of the guard; delete what was set aside. gpuexec also
// lists the folder (its queue, leftovers), reads the path before creating
// the record, sets each new file's permissions whatever the umask, and at
// the job's start notes its process group in the liveness file and the
// record: left out here.
func takeLock(path string) (release func() error, err error) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	signal.Notify(make(chan os.Signal, 16), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP,
		syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGCONT)
	const create = unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
	guard := func() (int, error) {
		g, err := unix.Open(path+".guard", unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return -1, fmt.Errorf("guard: %w", err)
		}
		if err := unix.Flock(g, unix.LOCK_EX); err != nil {
			unix.Close(g)
			return -1, fmt.Errorf("guard: %w", err)
		}
		return g, nil
	}
	g, err := guard()
	if err != nil {
		return nil, err
	}
	defer unix.Close(g)
	live := fmt.Sprintf("%s.live-%016x", path, os.Getpid())
	l, err := unix.Open(live, create, 0o640)
	if err != nil {
		return nil, fmt.Errorf("liveness file: %w", err)
	}
	if err := unix.Flock(l, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("liveness file: %w", err)
	}
	r, err := unix.Open(path, create, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	record := fmt.Sprintf(`{"pid":%d,"acquiredAt":%q,"owner":"bench","slug":"floor","token":"%016x"}`,
		os.Getpid(), time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), os.Getpid())
	_, err = unix.Write(r, []byte(record))
	unix.Close(r)
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	return func() error {
		g, err := guard()
		if err != nil {
			return err
		}
		unix.Flock(l, unix.LOCK_UN)
		unix.Close(l)
		if err := unix.Unlink(live); err != nil {
			unix.Close(g)
			return fmt.Errorf("liveness file: %w", err)
		}
		r, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Read(r, make([]byte, 4096))
			unix.Close(r)
		}
		if err != nil {
			unix.Close(g)
			return fmt.Errorf("record: %w", err)
		}
		tomb := fmt.Sprintf("%s.stale-%d", path, os.Getpid())
		err = unix.Rename(path, tomb)
		unix.Close(g)
		if err != nil {
			return fmt.Errorf("record: %w", err)
		}
		return unix.Unlink(tomb)
	}, nil
}
