//go:build windows

package lock

import (
	"os"
	"os/user"
	"strings"
)

// loginName is the account name without its domain (os/user needs no cgo
// on Windows), else %USERNAME%.
func loginName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		name := u.Username
		if i := strings.LastIndexAny(name, `\/`); i >= 0 {
			name = name[i+1:]
		}
		return name
	}
	return os.Getenv("USERNAME")
}
