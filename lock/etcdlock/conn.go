package etcdlock

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpuexec/gpuexec/internal/etcdoptions"
	"github.com/gpuexec/gpuexec/internal/etcdurl"
	"github.com/gpuexec/gpuexec/lock"
)

// conn is a client connected to the lock's cluster.
type conn struct {
	cli  *clientv3.Client
	u    *etcdurl.URL
	path string // the lock's URL

	closeOnce sync.Once
	closed    chan struct{}
}

// mutexName is the lock's name in the key layout: KEY and the separator no
// KEY holds. concurrency.Mutex adds the "/" of prefix.
func (c *conn) mutexName() string { return c.u.Key + etcdurl.Separator }

// prefix is what the lock's keys start with, and no other lock's do (see
// the package's doc): every listing and deletion is under it.
func (c *conn) prefix() string { return c.mutexName() + "/" }

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.cli.Close()
	})
}

func (c *conn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// dial connects to the cluster named by path and checks within the URL's
// dial timeout that it answers; a cluster that does not is
// lock.ErrUnreachable.
func dial(o lock.Options) (*conn, error) {
	u, err := etcdoptions.Check(o)
	if err != nil {
		return nil, err
	}
	path := o.Path
	cfg := clientv3.Config{
		DialTimeout:          u.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zap.NewNop(),
	}
	scheme := "http://"
	if u.TLS() {
		scheme = "https://"
		if cfg.TLS, err = tlsConfig(u); err != nil {
			return nil, err
		}
	}
	for _, ep := range u.Endpoints {
		cfg.Endpoints = append(cfg.Endpoints, scheme+ep)
	}
	if u.User != "" {
		cfg.Username = u.User
		if u.PasswordFile != "" {
			if cfg.Password, err = readPassword(u.PasswordFile); err != nil {
				return nil, err
			}
		}
	}
	where := strings.Join(u.Endpoints, ",")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, unreachable(where, u.DialTimeout, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.DialTimeout)
	defer cancel()
	c := &conn{cli: cli, u: u, path: path, closed: make(chan struct{})}
	if _, err := cli.Get(ctx, c.prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, unreachable(where, u.DialTimeout, err)
	}
	return c, nil
}

// unreachable words a failed first contact; only a cluster that did not
// answer (as opposed to one that refused us) is lock.ErrUnreachable.
func unreachable(where string, timeout time.Duration, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || codeOf(err) == codes.DeadlineExceeded:
		return fmt.Errorf("lock: etcd at %s did not answer within %s (the URL's dial-timeout): %w", where, timeout, lock.ErrUnreachable)
	case codeOf(err) == codes.Unavailable:
		return fmt.Errorf("lock: etcd at %s: %v: %w", where, err, lock.ErrUnreachable)
	}
	return fmt.Errorf("lock: etcd at %s: %w", where, err)
}

// codeOf is err's gRPC code, whether err is an etcd server error
// (rpctypes.EtcdError, which the client makes of the errors it knows) or a
// gRPC status; codes.Unknown for anything else.
func codeOf(err error) codes.Code {
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		return etcdErr.Code()
	}
	return status.Code(err)
}

func tlsConfig(u *etcdurl.URL) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if u.CACert != "" {
		pem, err := os.ReadFile(u.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd lock: cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd lock: cacert %s holds no PEM certificate", u.CACert)
		}
		tc.RootCAs = pool
	}
	if u.Cert != "" {
		cert, err := tls.LoadX509KeyPair(u.Cert, u.CertKey)
		if err != nil {
			return nil, fmt.Errorf("etcd lock: cert/key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// readPassword is the first line of file.
func readPassword(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("etcd lock: password-file: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("etcd lock: password-file %s: empty", file)
	}
	return strings.TrimRight(line, "\r\n"), nil
}
