// Package etcdurl parses etcd:// lock paths:
//
//	etcd://HOST:PORT[,HOST:PORT...]/KEY[?PARAM=VALUE&...]
//
// It is all that gpuexec itself knows of etcd: enough to tell an etcd lock
// from a lock file and to refuse a malformed URL before anything starts.
// The etcd client lives in package etcdlock, run by the gpuexec-etcd helper.
package etcdurl

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Scheme starts a lock path that names an etcd lock:
//
//	etcd://HOST:PORT[,HOST:PORT...]/KEY[?PARAM=VALUE&...]
//
// The lock's keys are under KEY + Separator + "/" on that etcd cluster
// (see Parse).
const Scheme = "etcd://"

// Separator is a character that no Key contains: Parse refuses it, and a
// URL carries it only as the start of a fragment. The lock's own keys are
// under the prefix Key + Separator + "/" (package etcdlock), so that no
// lock's keys are under another lock's prefix, whatever names users choose:
// the first Separator of a key ends the name of the lock it belongs to.
const Separator = "#"

// Is reports whether path names a lock that is not a file (an
// etcd:// URL).
func Is(path string) bool {
	return len(path) >= len(Scheme) && strings.EqualFold(path[:len(Scheme)], Scheme)
}

// LooksLikeURL reports whether path, which Is does not take for an etcd
// lock, is shaped like a URL or a network address (HOST:PORT) rather than
// a file's path: a mistyped etcd URL, which taken as a path would be a lock
// file of this machine alone where a lock shared by several was meant. It
// is when its first name holds a colon: the text before the first / or \,
// or, after a leading // or \\, the host of a network path. A Windows
// drive (one letter and a colon: C:\gpu.lock, C:/gpu.lock, C:gpu.lock) is
// not, unless what follows the colon is a port (h:2379/k). So
// http://h:2379/k, etcd3://h:2379/k, etcd:/h:2379/k, etcd:h:2379/k,
// h.example:2379/k, 127.0.0.1:2379/k, [::1]:2379/k and //h:2379/k are;
// /srv/a:b/gpu.lock, ./h:2379/gpu.lock, \\server\share\gpu.lock and
// \\?\C:\gpu\gpu.lock are not: a local name with a colon is written
// with ./ before it.
func LooksLikeURL(path string) bool {
	if Is(path) {
		return false
	}
	isSep := func(c byte) bool { return c == '/' || c == '\\' }
	rest := path
	if len(rest) >= 2 && isSep(rest[0]) && isSep(rest[1]) {
		rest = strings.TrimLeft(rest, `/\`)
	}
	first := rest
	if i := strings.IndexAny(rest, `/\`); i >= 0 {
		first = rest[:i]
	}
	colon := strings.IndexByte(first, ':')
	if colon < 0 {
		return false
	}
	c := first[0]
	drive := colon == 1 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	return !drive || isPort(first[2:])
}

// isPort reports whether s is a port number as written after HOST: (1 to 5
// digits; Parse checks its range).
func isPort(s string) bool {
	if s == "" || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Defaults of an etcd lock's parameters.
const (
	// DefaultTTL is the lease TTL of an etcd lock: a holder that dies
	// without releasing blocks the lock this long at most.
	DefaultTTL = 60 * time.Second
	// DefaultDialTimeout bounds how long gpuexec tries to reach etcd at
	// start before it fails (exit 125).
	DefaultDialTimeout = 5 * time.Second
)

// URL is an etcd:// lock path taken apart.
type URL struct {
	// Endpoints are the cluster's client addresses, HOST:PORT each.
	Endpoints []string
	// Key is the lock's name: "/" and the URL's path without a trailing
	// slash, as written (percent-encoding is not decoded). It holds no
	// Separator, '?', '%', empty segment or control character. The
	// holder's and the waiters' keys are Key + Separator + "/" + their
	// lease id in hex.
	Key string
	// TTL is the session lease's time to live (ttl=, whole seconds).
	TTL time.Duration
	// DialTimeout bounds the first contact with etcd (dial-timeout=).
	DialTimeout time.Duration
	// CACert, Cert and Key are PEM files for TLS (cacert=, cert=, key=);
	// TLS is used when CACert or Cert is set.
	CACert, Cert, CertKey string
	// User and PasswordFile are for etcd's authentication (user=,
	// password-file=: the password is the file's first line).
	User, PasswordFile string
}

// TLS reports whether the connection uses TLS.
func (u *URL) TLS() bool { return u.CACert != "" || u.Cert != "" }

// Parse parses an etcd:// lock path:
//
//	etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/gpuexec/render-box?ttl=30s
//
// The key (gpuexec/render-box) is taken as written: a '%' in it is refused
// rather than decoded, so that no key has two spellings and none can spell
// Separator, and so are control characters.
//
// Parameters: ttl (lease TTL, default DefaultTTL, at least 2s),
// dial-timeout (default DefaultDialTimeout), cacert, cert, key (TLS),
// user and password-file (authentication). Credentials are never part of
// the URL itself: it is logged and passed to the job in GPUEXEC_LOCK.
func Parse(s string) (*URL, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("etcd lock %q: %s", s, fmt.Sprintf(format, a...))
	}
	if !Is(s) {
		return nil, bad("not an %s URL", Scheme)
	}
	rest := s[len(Scheme):]
	rest, query, _ := strings.Cut(rest, "?")
	if strings.ContainsAny(rest, "#") || strings.Contains(query, "#") {
		return nil, bad("a fragment (#) is not allowed")
	}
	hosts, key, ok := strings.Cut(rest, "/")
	if !ok || strings.Trim(key, "/") == "" {
		return nil, bad("no key: write etcd://HOST:PORT/KEY, e.g. etcd://127.0.0.1:2379/gpuexec/gpu0")
	}
	if strings.Contains(hosts, "@") {
		return nil, bad("credentials in the URL are not allowed (they would be logged and passed to the job): use ?user=NAME&password-file=FILE")
	}
	u := &URL{
		Key:         "/" + strings.Trim(key, "/"),
		TTL:         DefaultTTL,
		DialTimeout: DefaultDialTimeout,
	}
	if strings.Contains(u.Key, "//") {
		return nil, bad("empty segment in key %q", u.Key)
	}
	if strings.Contains(u.Key, "%") {
		return nil, bad("%% in the key: percent-encoding is not decoded in a key; write its characters as they are (a key cannot hold %s, ? or %%)", Separator)
	}
	if strings.ContainsFunc(u.Key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, bad("a control character in the key")
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, ok := splitHostPort(h)
		if !ok {
			return nil, bad("endpoint %q is not HOST:PORT", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || host == "" {
			return nil, bad("endpoint %q: bad port", h)
		}
		u.Endpoints = append(u.Endpoints, h)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, bad("%v", err)
	}
	for name, vals := range q {
		if len(vals) != 1 {
			return nil, bad("parameter %s given %d times", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "ttl", "dial-timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, bad("%s=%s is not a positive duration", name, v)
			}
			if name == "dial-timeout" {
				u.DialTimeout = d
				continue
			}
			if d < 2*time.Second || d%time.Second != 0 {
				return nil, bad("ttl=%s: etcd leases count whole seconds, at least 2s", v)
			}
			u.TTL = d
		case "cacert":
			u.CACert = v
		case "cert":
			u.Cert = v
		case "key":
			u.CertKey = v
		case "user":
			u.User = v
		case "password-file":
			u.PasswordFile = v
		default:
			return nil, bad("unknown parameter %q (known: ttl, dial-timeout, cacert, cert, key, user, password-file)", name)
		}
	}
	if (u.Cert == "") != (u.CertKey == "") {
		return nil, bad("cert= and key= go together")
	}
	if u.PasswordFile != "" && u.User == "" {
		return nil, bad("password-file= needs user=")
	}
	return u, nil
}

// splitHostPort is net.SplitHostPort for HOST:PORT and [IPv6]:PORT,
// written out so that this package (and gpuexec, which starts on every job)
// does not link package net.
func splitHostPort(s string) (host, port string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", false
	}
	host, port = s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || strings.ContainsAny(host[1:len(host)-1], "[]") {
			return "", "", false
		}
		host = host[1 : len(host)-1]
	} else if strings.ContainsAny(host, ":[]") {
		return "", "", false
	}
	return host, port, host != "" && port != ""
}
