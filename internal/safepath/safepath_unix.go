//go:build unix

package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the links followed, as the kernel's ELOOP does.
const maxLinks = 40

// Dir resolves the absolute folder dir as the package says, creating the
// folders that are missing when create is not 0 (each in a folder already
// found safe): dir itself with mode create (0700 for a lock's folder:
// private to this user, whose files are then opened by nobody else,
// whatever group they are in), the folders above it 0755, as the umask
// has them. With private, dir itself must be this user's or root's and
// writable by nobody else (a log file's folder). With create 0, a missing
// part is returned as it is: nothing is there to be redirected.
func Dir(dir string, create fs.FileMode, private bool) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%s: not an absolute path", dir)
	}
	for range 3 {
		real, missing, err := walk(filepath.Clean(dir))
		if err != nil {
			return "", err
		}
		if len(missing) == 0 {
			if private {
				if err := privateDir(real); err != nil {
					return "", err
				}
			}
			return real, nil
		}
		if create == 0 {
			return filepath.Join(append([]string{real}, missing...)...), nil
		}
		// real is safe for new entries (walk checked it as the parent
		// of the first missing one); so is each folder made here.
		p := real
		for i, m := range missing {
			p = filepath.Join(p, m)
			perm := fs.FileMode(0o755)
			if i == len(missing)-1 {
				perm = create
			}
			if err := os.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", err
			}
		}
		// Walk again: what was made, or found made by someone else in
		// between, must pass too.
	}
	return "", fmt.Errorf("%s: keeps changing while it is created", dir)
}

// walk resolves path component by component, returning the real folder
// reached and the components missing below it.
func walk(path string) (string, []string, error) {
	uid := uint32(os.Geteuid())
	comps := split(path)
	cur := "/"
	links := 0
	for i := 0; i < len(comps); i++ {
		next := filepath.Join(cur, comps[i])
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			if err := entryIn(cur, uid, uid, ""); err != nil {
				return "", nil, err
			}
			return cur, comps[i:], nil
		}
		if err != nil {
			return "", nil, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return "", nil, fmt.Errorf("%s: cannot tell its owner", next)
		}
		if err := entryIn(cur, st.Uid, uid, comps[i]); err != nil {
			return "", nil, err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if st.Uid != uid && st.Uid != 0 {
				return "", nil, &Error{Path: next, Owner: int(st.Uid),
					Why: fmt.Sprintf("is a symbolic link of another user (uid %d), who could point it anywhere", st.Uid)}
			}
			if links++; links > maxLinks {
				return "", nil, fmt.Errorf("%s: too many symbolic links", path)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			comps = append(split(filepath.Clean(target)), comps[i+1:]...)
			cur, i = "/", -1
		case fi.IsDir():
			cur = next
		default:
			return "", nil, fmt.Errorf("%s: %w", next, syscall.ENOTDIR)
		}
	}
	return cur, nil, nil
}

// entryIn checks that nobody but this user (uid) or root can rename or
// replace the entry name, owned by owner, in folder dir ("" name: a new
// entry this user will make).
func entryIn(dir string, owner, uid uint32, name string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell its owner", dir)
	}
	what := "what is made in it"
	if name != "" {
		what = name
	}
	if st.Uid != uid && st.Uid != 0 {
		return &Error{Path: dir, Owner: int(st.Uid),
			Why: fmt.Sprintf("belongs to another user (uid %d), who could move %s away", st.Uid, what)}
	}
	perm := fi.Mode().Perm()
	switch {
	case perm&0o022 == 0:
		return nil
	case fi.Mode()&fs.ModeSticky != 0 && (owner == uid || owner == 0):
		return nil
	case fi.Mode()&fs.ModeSticky != 0:
		return &Error{Path: filepath.Join(dir, name), Owner: int(owner),
			Why: fmt.Sprintf("belongs to another user (uid %d), who may move it away in %s (a sticky folder)", owner, dir)}
	default:
		return &Error{Path: dir, Owner: -1,
			Why: fmt.Sprintf("may be written by others (%s), who could move %s away", fi.Mode(), what)}
	}
}

// privateDir checks that dir is this user's or root's, and that nobody
// else may write it: its owner, or anyone who may write it, could put a
// link, a FIFO or another file in the place of a file in it.
func privateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell its owner", dir)
	}
	if int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return &Error{Path: dir, Owner: int(st.Uid),
			Why: fmt.Sprintf("belongs to another user (uid %d), who could put a link or another file in the file's place", st.Uid)}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &Error{Path: dir, Owner: -1,
			Why: fmt.Sprintf("may be written by others (%s), who could put a link or a FIFO in the file's place", fi.Mode())}
	}
	return nil
}

func split(path string) []string {
	var out []string
	for _, c := range strings.Split(path, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}
