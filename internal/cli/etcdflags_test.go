package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// With an etcd lock --kill-after must be under a third of the lease's ttl
// (never is refused), and --poll on the command line is refused: one line,
// 125, before etcd is asked anything (no etcd here, and no helper). A
// GPUEXEC_POLL is ignored with a warning.
func TestEtcdLockFlags(t *testing.T) {
	t.Parallel()
	const url = "etcd://127.0.0.1:1/gpuexec/flags?dial-timeout=100ms"
	cases := []struct {
		name string
		args []string
		env  []string
		// refused: the one line; "" when the flags are let be (and the
		// job then fails for want of the helper).
		refused string
		warn    string
	}{
		{name: "kill-after at a third of ttl", args: []string{"--lock", url + "&ttl=30s", "--kill-after", "10s"},
			refused: "--kill-after must be under 10s with this etcd lock (a third of its ttl=30s)"},
		{name: "kill-after above, default ttl", args: []string{"--lock", url, "--kill-after", "20s"},
			refused: "--kill-after must be under 20s with this etcd lock (a third of its ttl=60s)"},
		{name: "kill-after from the environment", args: []string{"--lock", url}, env: []string{"GPUEXEC_KILL_AFTER=1m"},
			refused: "--kill-after must be under 20s"},
		{name: "kill-after never", args: []string{"--lock", url, "--kill-after", "never"},
			refused: "--kill-after never cannot be used with an etcd lock"},
		{name: "poll", args: []string{"--lock", url, "--poll", "1s"},
			refused: "--poll has no effect on an etcd lock"},
		{name: "run poll", args: []string{"run", "--lock", url, "--poll", "1s"},
			refused: "--poll has no effect on an etcd lock"},
		// No --kill-after: the default, 10s, would break the rule with a
		// ttl of 30s or less; there it is a quarter of the ttl.
		{name: "default kill-after, short ttl", args: []string{"--lock", url + "&ttl=12s"}},
		{name: "kill-after under", args: []string{"--lock", url + "&ttl=30s", "--kill-after", "9s"}},
		{name: "on-lost continue", args: []string{"--lock", url, "--kill-after", "never", "--on-lost", "continue"}},
		{name: "GPUEXEC_POLL", args: []string{"--lock", url}, env: []string{"GPUEXEC_POLL=1s"},
			warn: "GPUEXEC_POLL has no effect on an etcd lock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			env := tmpEnv(t, append(tc.env, role("exit"), "GPUEXEC_ETCD_AGENT="+filepath.Join(tmp, "no-helper"))...)
			r := gx(t, env, append(tc.args, "--wait", "0", "--", helperBin, "0")...)
			if tc.refused != "" {
				wantRefused(t, r, tc.refused)
				return
			}
			wantCode(t, r, 125) // no helper
			if !strings.Contains(r.stderr, "no-helper") || strings.Contains(r.stderr, "--kill-after") || strings.Contains(r.stderr, "--poll") {
				t.Errorf("want the helper missing, and no word of the flags:\n%s", r.stderr)
			}
			if tc.warn != "" && !regexp.MustCompile(`\[WARN\] +gpuexec: `+regexp.QuoteMeta(tc.warn)).MatchString(r.stderr) {
				t.Errorf("stderr lacks the WARN line %q:\n%s", tc.warn, r.stderr)
			}
		})
	}
}
