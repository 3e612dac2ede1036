package etcdurl

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	u, err := Parse("etcd://10.0.0.1:2379,10.0.0.2:2379,[::1]:2379/gpuexec/render-box/?ttl=30s&dial-timeout=2s&cacert=/ca.pem&cert=/c.pem&key=/k.pem&user=gx&password-file=/pw")
	if err != nil {
		t.Fatal(err)
	}
	want := URL{
		Endpoints: []string{"10.0.0.1:2379", "10.0.0.2:2379", "[::1]:2379"}, Key: "/gpuexec/render-box",
		TTL: 30 * time.Second, DialTimeout: 2 * time.Second, CACert: "/ca.pem", Cert: "/c.pem", CertKey: "/k.pem",
		User: "gx", PasswordFile: "/pw",
	}
	if strings.Join(u.Endpoints, " ") != strings.Join(want.Endpoints, " ") || u.Key != want.Key || u.TTL != want.TTL ||
		u.DialTimeout != want.DialTimeout || u.CACert != want.CACert || u.Cert != want.Cert || u.CertKey != want.CertKey ||
		u.User != want.User || u.PasswordFile != want.PasswordFile || !u.TLS() {
		t.Errorf("got %+v\nwant %+v", *u, want)
	}
	u, err = Parse("etcd://h:2379/k")
	if err != nil || u.TTL != DefaultTTL || u.DialTimeout != DefaultDialTimeout || u.TLS() || u.Key != "/k" {
		t.Errorf("defaults: %+v, %v", u, err)
	}
	for _, bad := range []string{
		"etcd://h:2379", "etcd://h:2379/", "etcd://h:2379//", "etcd://h:2379/a//b", "etcd:///k", "etcd://h/k",
		"etcd://h:0/k", "etcd://h:99999/k", "etcd://u:p@h:1/k", "etcd://h:1/k#f", "etcd://h:1/k?ttl=1s",
		"etcd://h:1/k?ttl=2500ms", "etcd://h:1/k?ttl=x", "etcd://h:1/k?dial-timeout=-1s", "etcd://h:1/k?cert=/c",
		"etcd://h:1/k?password-file=/p", "etcd://h:1/k?ttl=2s&ttl=3s", "etcd://h:1/k?what=1", "/tmp/gpu.lock",
		// The separator of the key layout, spelt any way, and what
		// cannot be typed.
		"etcd://h:1/k#", "etcd://h:1/k#/x", "etcd://h:1/k%23", "etcd://h:1/k%23/x", "etcd://h:1/k%2F", "etcd://h:1/k%",
		"etcd://h:1/k\x00", "etcd://h:1/k\x00x", "etcd://h:1/k\nx", "etcd://h:1/k\x7f",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted it", bad)
		}
	}
}

// A lock path shaped like a URL or HOST:PORT that is not etcd:// is a
// mistyped etcd URL; file paths, Windows ones included, are not.
func TestLooksLikeURL(t *testing.T) {
	cases := []struct {
		path string
		want bool
	}{
		// URLs of another scheme, and etcd:// misspelt.
		{"http://127.0.0.1:2379/gpuexec/x", true},
		{"https://etcd.example:2379/gpuexec/x", true},
		{"HTTP://h:2379/k", true},
		{"etcd3://h:2379/k", true},
		{"etcd:/h:2379/k", true},
		{"etcd:h:2379/k", true},
		{"etcd:h", true},
		{"etcd//h:2379/k", false}, // no colon: a relative path
		{" etcd://h:2379/k", true},
		{"file:///tmp/gpu.lock", true},
		{"unix:/run/gpu.sock", true},
		{"gpu:0.lock", true},
		// HOST:PORT without a scheme.
		{"127.0.0.1:2379/gpuexec/x", true},
		{"127.0.0.1:2379", true},
		{"host:2379/gpuexec/x", true},
		{"h.example.com:2379/k", true},
		{"[::1]:2379/k", true},
		{"h:2379/k", true}, // one letter, then a port: not a drive
		{`h:2379\k`, true},
		{"//h:2379/k", true},
		{`\\h:2379\k`, true},
		{"///h:2379/k", true},
		{":2379/k", true},
		// etcd:// itself is Is's, not this.
		{"etcd://h:2379/k", false},
		{"ETCD://h:2379/k", false},
		{"etcd:///k", false}, // Parse refuses it
		// File paths.
		{"", false},
		{"gpu.lock", false},
		{"locks/gpu.lock", false},
		{"/tmp/gpuexec/gpu.lock", false},
		{"/srv/a:b/gpu.lock", false},
		{"/host:2379/gpu.lock", false}, // absolute: a folder of /
		{"./host:2379/gpuexec/x", false},
		{"../a:b/gpu.lock", false},
		{"locks/host:2379/gpu.lock", false},
		{`.\host:2379\gpu.lock`, false},
		// Windows paths.
		{`C:\gpu\gpu.lock`, false},
		{"C:/gpu/gpu.lock", false},
		{"c:gpu.lock", false},
		{"C:", false},
		{`C:\`, false},
		{`\\server\share\gpu.lock`, false},
		{"//server/share/gpu.lock", false},
		{`\\?\C:\gpu\gpu.lock`, false},
		{`\\.\C:\gpu\gpu.lock`, false},
		{`\\?\UNC\server\share\gpu.lock`, false},
		{`C:\a:b\gpu.lock`, false},
	}
	for _, tc := range cases {
		if got := LooksLikeURL(tc.path); got != tc.want {
			t.Errorf("LooksLikeURL(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// A key is taken as written; every character a name may hold is kept, and
// none of them is Separator. Percent-encoding in the parameters is still
// decoded.
func TestParseKeepsTheKeyAsWritten(t *testing.T) {
	for in, want := range map[string]string{
		"etcd://h:1/t/box":                       "/t/box",
		"etcd://h:1/t/box/":                      "/t/box",
		"etcd://h:1/t/box/gpu0":                  "/t/box/gpu0",
		"etcd://h:1/t/box-0.x_y~z:w+v=u,s;r@q!p": "/t/box-0.x_y~z:w+v=u,s;r@q!p",
		"etcd://h:1/渲染/卡0":                       "/渲染/卡0",
		"etcd://h:1/t/box?cacert=/a%20b.pem":     "/t/box",
	} {
		u, err := Parse(in)
		if err != nil || u.Key != want || strings.Contains(u.Key, Separator) {
			t.Errorf("Parse(%q): %+v, %v; want key %q", in, u, err, want)
		}
	}
	if u, err := Parse("etcd://h:1/t/box?cacert=/a%20b.pem"); err != nil || u.CACert != "/a b.pem" {
		t.Errorf("cacert: %+v, %v", u, err)
	}
}
