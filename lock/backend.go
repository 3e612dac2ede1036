package lock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Locker is a held lock of any backend: a lock file (*Held) or an etcd key
// (see EtcdScheme). Whoever holds one need not know which.
type Locker interface {
	// Path names the lock: the lock file's absolute path, or the etcd://
	// URL as given.
	Path() string
	// Info is the holder's record as written.
	Info() Info
	// Lost is closed when the lock was found to be no longer ours; someone
	// else may hold it from then on.
	Lost() <-chan struct{}
	// LostReason says why Lost was closed; nil while it is not.
	LostReason() error
	// RecordChild notes the process group of the job run under the lock.
	RecordChild(pgid int) error
	// Release gives the lock up if it is still ours. Later calls do
	// nothing.
	Release() error
}

var _ Locker = (*Held)(nil)

// Backend takes, inspects and clears locks of one kind. BackendFor picks
// the one a lock path names.
type Backend interface {
	// Acquire queues for the lock until it is held or ctx ends (then the
	// error is a *WaitError wrapping ctx's error).
	Acquire(ctx context.Context, o Options) (Locker, error)
	// TryAcquire takes the lock if it is free and nobody is queued for it;
	// contention is (nil, false, nil).
	TryAcquire(o Options) (Locker, bool, error)
	// Inspect reads the lock and its queue; it changes nothing.
	Inspect(o Options) (*Status, error)
	// Clear removes a stale lock (a live holder's only with force; else
	// ErrHeld) and returns it as judged.
	Clear(o Options, force bool) (*Status, error)
}

// Files is the lock-file backend: Acquire, TryAcquire, Inspect and Clear of
// this package.
var Files Backend = fileBackend{}

type fileBackend struct{}

func (fileBackend) Acquire(ctx context.Context, o Options) (Locker, error) {
	h, err := Acquire(ctx, o)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (fileBackend) TryAcquire(o Options) (Locker, bool, error) {
	h, ok, err := TryAcquire(o)
	if !ok {
		return nil, false, err
	}
	return h, true, err
}

func (fileBackend) Inspect(o Options) (*Status, error) { return Inspect(o.Path, o.Stale) }

func (fileBackend) Clear(o Options, force bool) (*Status, error) {
	return Clear(o.Path, force, o.Stale, o.Logger)
}

// BackendFor is the backend of the lock at path: Etcd for an etcd:// URL,
// Files for anything else.
func BackendFor(path string) Backend {
	if IsRemote(path) {
		return Etcd
	}
	return Files
}

// EtcdScheme starts a lock path that names an etcd lock:
//
//	etcd://HOST:PORT[,HOST:PORT...]/KEY[?PARAM=VALUE&...]
//
// The lock is the key prefix KEY/ on that etcd cluster (see ParseEtcdURL).
const EtcdScheme = "etcd://"

// IsRemote reports whether path names a lock that is not a file (an
// etcd:// URL).
func IsRemote(path string) bool {
	return len(path) >= len(EtcdScheme) && strings.EqualFold(path[:len(EtcdScheme)], EtcdScheme)
}

// Defaults of an etcd lock's parameters.
const (
	// DefaultEtcdTTL is the lease TTL of an etcd lock: a holder that dies
	// without releasing blocks the lock this long at most.
	DefaultEtcdTTL = 60 * time.Second
	// DefaultEtcdDialTimeout bounds how long gpuexec tries to reach etcd at
	// start before it fails (exit 125).
	DefaultEtcdDialTimeout = 5 * time.Second
)

// EtcdURL is an etcd:// lock path taken apart.
type EtcdURL struct {
	// Endpoints are the cluster's client addresses, HOST:PORT each.
	Endpoints []string
	// Key is the lock's key prefix, without a trailing slash: the holder's
	// and the waiters' keys are Key + "/" + their lease id in hex.
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
func (u *EtcdURL) TLS() bool { return u.CACert != "" || u.Cert != "" }

// ParseEtcdURL parses an etcd:// lock path:
//
//	etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/gpuexec/render-box?ttl=30s
//
// Parameters: ttl (lease TTL, default DefaultEtcdTTL, at least 2s),
// dial-timeout (default DefaultEtcdDialTimeout), cacert, cert, key (TLS),
// user and password-file (authentication). Credentials are never part of
// the URL itself: it is logged and passed to the job in GPUEXEC_LOCK.
func ParseEtcdURL(s string) (*EtcdURL, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: etcd lock %q: %s", ErrInvalid, s, fmt.Sprintf(format, a...))
	}
	if !IsRemote(s) {
		return nil, bad("not an %s URL", EtcdScheme)
	}
	rest := s[len(EtcdScheme):]
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
	u := &EtcdURL{
		Key:         "/" + strings.Trim(key, "/"),
		TTL:         DefaultEtcdTTL,
		DialTimeout: DefaultEtcdDialTimeout,
	}
	if strings.Contains(u.Key, "//") {
		return nil, bad("empty segment in key %q", u.Key)
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

// WaitingLine is the line a waiter logs while the lock is held by holder:
// "waiting for GPU lock: held by channels/ep12 (pid 4242) since 20:18
// (position 2 in queue)". pos 0 leaves the position out. Other backends use
// it so that every backend logs the same line.
func WaitingLine(holder *Status, pos int) string {
	return waitingLine([]*Status{holder}, pos)
}

// FormatAge renders a duration as the log lines do (whole seconds).
func FormatAge(d time.Duration) string { return fmtAge(d) }

// errRemotePath is returned by the file functions for an etcd:// path.
func errRemotePath(path string) error {
	return fmt.Errorf("%w: %s names an etcd lock; use BackendFor(path)", ErrInvalid, path)
}

// ErrUnreachable is wrapped by errors of remote backends that could not reach
// their service within its dial timeout.
var ErrUnreachable = errors.New("lock service unreachable")

// nullLogger returns l, or a logger that drops everything.
func nullLogger(l hclog.Logger) hclog.Logger {
	if l == nil {
		return hclog.NewNullLogger()
	}
	return l
}
