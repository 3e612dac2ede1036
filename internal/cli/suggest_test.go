package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"status", "status", 0},
		{"stauts", "status", 1},
		{"statsu", "status", 1},
		{"stats", "status", 1},
		{"claer", "clear", 1},
		{"clera", "clear", 1},
		{"rnu", "run", 1},
		{"", "run", 3},
		{"python", "status", 6},
		{"ünï", "uni", 2},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// Only a name close to a subcommand gets the hint; paths and files that
// exist never do.
func TestDidYouMean(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("stauts", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	hint := didYouMean([]*cli.Command{{Name: "run"}, {Name: "status"}, {Name: "clear"}, {Name: "completion"}})
	for _, tt := range []struct {
		name, want string
	}{
		{"statsu", "gpuexec status"},
		{"Status", "gpuexec status"},
		{"sttaus", "gpuexec status"},
		{"claer", "gpuexec clear"},
		{"rnu", "gpuexec run"},
		{"completoin", "gpuexec completion"},
		{"stauts", ""}, // a file of that name exists here
		{"./statsu", ""},
		{filepath.Join(dir, "claer"), ""},
		{"rm", ""},
		{"python", ""},
		{"cl", ""},
		{"", ""},
		{strings.Repeat("s", 1000), ""},
	} {
		got := hint(tt.name)
		if tt.want == "" && got != "" || tt.want != "" && got != `did you mean "`+tt.want+`"?` {
			t.Errorf("hint for %q = %q, want %q", tt.name, got, tt.want)
		}
	}
}
