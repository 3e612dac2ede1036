//go:build unix

package lock

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// loginName is $USER or $LOGNAME, else the name /etc/passwd gives the real
// uid, else "uid<N>". It does not use os/user: with cgo, importing it links
// gpuexec against libc, and the dynamic loader alone costs every run a
// measurable share of the wrapper's overhead (see README, Performance).
func loginName() string {
	for _, v := range []string{"USER", "LOGNAME"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	return userName(os.Getuid())
}

// userName is the name /etc/passwd gives uid, else "uid<N>".
func userName(uid int) string {
	id := strconv.Itoa(uid)
	if f, err := os.Open("/etc/passwd"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// name:password:uid:gid:gecos:home:shell
			fields := strings.SplitN(sc.Text(), ":", 4)
			if len(fields) >= 3 && fields[2] == id && fields[0] != "" {
				return fields[0]
			}
		}
	}
	return "uid" + id
}
