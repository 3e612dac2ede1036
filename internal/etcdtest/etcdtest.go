// Package etcdtest starts throwaway etcd servers for tests on loopback
// ports, their data in a temporary folder, stopped when the test ends: one
// member (Start), or a cluster of several (StartCluster) whose members a
// test can kill, stop (SIGSTOP), continue and restart. Tests that need etcd
// skip (with a message) where its binary is missing, except under CI (CI
// set), where that is a failure: .ci/run installs it (Debian's
// etcd-server).
//
// Every member is started with --initial-cluster-token Token, so that
// members left behind by an interrupted test run can be found and ended:
// pkill -f gpuexec-etcd-test.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// BinaryEnv names an etcd binary to use instead of /usr/bin/etcd or the
// one on PATH.
const BinaryEnv = "GPUEXEC_TEST_ETCD"

// Binary is the etcd binary, or "" after skipping (or failing, under CI)
// t when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	if p := Find(); p != "" {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("etcd is not installed, and CI is set: .ci/run installs it (apt-get install etcd-server)")
	}
	t.Skip("etcd is not installed (Debian: apt-get install etcd-server; or set " + BinaryEnv + "); skipping the tests against a real etcd")
	return ""
}

// Find is the etcd binary: $GPUEXEC_TEST_ETCD, /usr/bin/etcd or etcd on
// PATH; "" if there is none.
func Find() string {
	if p := os.Getenv(BinaryEnv); p != "" {
		return p
	}
	if fi, err := os.Stat("/usr/bin/etcd"); err == nil && !fi.IsDir() {
		return "/usr/bin/etcd"
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return ""
}

// TLSFiles are the PEM files of a TLS setup: a CA, the server's
// certificate for 127.0.0.1 and a client certificate, all signed by it.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// Token is every member's --initial-cluster-token, also in its command
// line: pkill -f gpuexec-etcd-test ends the members a killed test left.
const Token = "gpuexec-etcd-test"

// Server is one etcd member on loopback.
type Server struct {
	bin, dir string
	name     string
	port     int    // client port
	peer     int    // peer port
	cluster  string // --initial-cluster; "" for a lone member
	tls      *TLSFiles
	logPath  string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	paused   bool
}

// Option changes how Start starts etcd.
type Option func(*Server)

// WithTLS serves clients over TLS only, requiring a client certificate
// signed by the CA in the returned files (written under t.TempDir()).
func WithTLS(files *TLSFiles) Option {
	return func(s *Server) { s.tls = files }
}

// Start starts an etcd member and waits until it serves; it is stopped
// when the test ends.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := StartIn(Binary(t), t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartIn starts the etcd binary bin as a member with its data under dir,
// outside any test (for a TestMain); end it with Kill.
func StartIn(bin, dir string, opts ...Option) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, name: "t"}
	for _, o := range opts {
		o(s)
	}
	s.logPath = filepath.Join(s.dir, "etcd.log")
	var err error
	for range 3 {
		var ports []int
		if ports, err = freePorts(2); err != nil {
			return nil, err
		}
		s.port, s.peer = ports[0], ports[1]
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// freePorts finds n loopback ports nobody listens on now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (s *Server) scheme() string {
	if s.tls != nil {
		return "https"
	}
	return "http"
}

// Endpoint is the client address, HOST:PORT.
func (s *Server) Endpoint() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is an etcd:// lock URL on this server for key, with query
// parameters (without "?") appended.
func (s *Server) URL(key, query string) string {
	u := "etcd://" + s.Endpoint() + "/" + key
	if query != "" {
		u += "?" + query
	}
	return u
}

// start starts the process (on the ports chosen) and waits until it
// answers, at most startWait.
func (s *Server) start() error {
	if err := s.spawn(); err != nil {
		return err
	}
	return s.awaitServing(time.Now().Add(startWait))
}

// startWait bounds a member's start, from its process's start to its first
// answer (a cluster's members' start together).
const startWait = 20 * time.Second

// peerURL is the member's peer address as a URL.
func (s *Server) peerURL() string { return "http://127.0.0.1:" + strconv.Itoa(s.peer) }

// spawn starts the process, without waiting for it to serve.
func (s *Server) spawn() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	client := s.scheme() + "://" + s.Endpoint()
	peer := s.peerURL()
	cluster := s.cluster
	// Fast elections: a lone member leads within a fraction of a second
	// of starting. A cluster's members keep etcd's own defaults (a
	// heartbeat every 100 ms, an election after 1 s without one), so that
	// a member that fails takes as long to replace as in a real cluster.
	heartbeat, election := "50", "300"
	if cluster == "" {
		cluster = s.name + "=" + peer
	} else {
		heartbeat, election = "100", "1000"
	}
	args := []string{
		"--name", s.name,
		"--data-dir", filepath.Join(s.dir, "data"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", cluster,
		"--initial-cluster-token", Token,
		"--heartbeat-interval", heartbeat,
		"--election-timeout", election,
		"--log-level", "error",
	}
	if s.tls != nil {
		args = append(args, "--cert-file", s.tls.ServerCert, "--key-file", s.tls.ServerKey,
			"--trusted-ca-file", s.tls.CA, "--client-cert-auth")
	}
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// etcd 3.4 refuses to start on architectures other than amd64 unless
	// told to.
	cmd.Env = append(os.Environ(), "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.paused = cmd, exited, false
	return nil
}

// awaitServing waits until the member answers a read, until deadline;
// past it (or if it exits) the member is killed and the error carries its
// log.
func (s *Server) awaitServing(deadline time.Time) error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	cfg := clientv3.Config{Endpoints: []string{s.scheme() + "://" + s.Endpoint()}, DialTimeout: time.Second, Logger: zap.NewNop()}
	if s.tls != nil {
		var err error
		if cfg.TLS, err = s.tls.ClientConfig(true); err != nil {
			return err
		}
	}
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("etcd %s exited at start:\n%s", s.name, b)
		default:
		}
		if err := probe(cfg); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("etcd %s did not serve within %s: %v\n%s", s.name, startWait, err, b)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-exited:
		case <-t.C:
		}
		t.Stop()
	}
}

// probe is one Get against the server. An etcd with authentication on
// refuses it, which still means it serves.
func probe(cfg clientv3.Config) error {
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/etcdtest-probe")
	if err != nil && isAuthError(err) {
		return nil
	}
	return err
}

func isAuthError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "user name is empty") || strings.Contains(s, "permission denied") || strings.Contains(s, "invalid auth token")
}

// Restart starts the member again, on the same ports and data, after Stop
// or Kill, and waits until it serves (a cluster's member: once it has
// rejoined a quorum).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Stop ends the member with SIGTERM (SIGKILL after 10 s) and waits for it.
func (s *Server) Stop() { s.end(syscall.SIGTERM) }

// Kill ends the member with SIGKILL and waits for it.
func (s *Server) Kill() { s.end(syscall.SIGKILL) }

// Running reports whether the member's process runs (paused or not).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Name is the member's name (--name).
func (s *Server) Name() string { return s.name }

func (s *Server) end(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(sig)
	if s.paused {
		// A stopped process handles SIGTERM once continued.
		resume(s.cmd.Process)
		s.paused = false
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Client is a client of the member (with the client certificate under
// TLS), closed when the test ends.
func (s *Server) Client(t testing.TB, user, password string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   []string{s.scheme() + "://" + s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
	}
	if s.tls != nil {
		var err error
		if cfg.TLS, err = s.tls.ClientConfig(true); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// ClientConfig is a TLS configuration trusting the CA, with the client
// certificate if withCert.
func (f *TLSFiles) ClientConfig(withCert bool) (*tls.Config, error) {
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// NewTLSFiles writes a CA, a server certificate for 127.0.0.1 and a client
// certificate (common name "gpuexec") under dir.
func NewTLSFiles(t testing.TB, dir string) *TLSFiles {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuexec test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := leaf(2, "etcd", x509.ExtKeyUsageServerAuth)
	cliDER, cliKey := leaf(3, "gpuexec", x509.ExtKeyUsageClientAuth)
	return &TLSFiles{
		CA:         write("ca.pem", "CERTIFICATE", caDER),
		ServerCert: write("server.pem", "CERTIFICATE", srvDER),
		ServerKey:  writeKey("server-key.pem", srvKey),
		ClientCert: write("client.pem", "CERTIFICATE", cliDER),
		ClientKey:  writeKey("client-key.pem", cliKey),
	}
}

// Pause stops the member with SIGSTOP: it keeps its ports and connections
// but answers nothing, as a hung machine or one cut off by the network
// does. Resume continues it; Kill and Stop end a paused member too. Unix
// only.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		t.Fatal("etcdtest: Pause of a member that never started")
	}
	if err := pause(s.cmd.Process); err != nil {
		t.Fatal(err)
	}
	s.paused = true
}

// Resume continues a member stopped by Pause.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return
	}
	if err := resume(s.cmd.Process); err != nil {
		t.Fatal(err)
	}
	s.paused = false
}
