package lock

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantPID int
		wantErr string // substring; empty means it parses
	}{
		{"seed record", `{"pid":4242,"acquiredAt":"2026-10-12T12:18:03.512Z","owner":"channels","slug":"ep12","token":"9f86d081884c7d65"}`, 4242, ""},
		{"gpuexec record with extras", `{"pid":7,"acquiredAt":"x","owner":"a","slug":"b","token":"0123456789abcdef","host":"h","pidStart":123,"childPgid":9}`, 7, ""},
		{"unknown fields ignored", `{"pid":7,"token":"0123456789abcdef","future":{"nested":[1,2]}}`, 7, ""},
		{"surrounding whitespace", "\n  {\"pid\":7,\"token\":\"0123456789abcdef\"}\r\n", 7, ""},
		{"empty", ``, 0, "empty"},
		{"whitespace only", " \t\n ", 0, "empty"},
		{"binary garbage", "\x00\xff\xfe garbage", 0, "invalid character"},
		{"truncated JSON", `{"pid":4242,"acquiredAt":"2026-10`, 0, "unexpected end"},
		{"JSON array", `[1,2,3]`, 0, "cannot unmarshal"},
		{"JSON null", `null`, 0, "null"},
		{"JSON string", `"locked"`, 0, "cannot unmarshal"},
		{"pid as string", `{"pid":"4242","token":"0123456789abcdef"}`, 0, "cannot unmarshal"},
		{"pid fractional", `{"pid":42.5,"token":"0123456789abcdef"}`, 0, "cannot unmarshal"},
		{"token as number", `{"pid":42,"token":12}`, 0, "cannot unmarshal"},
		{"pid zero", `{"pid":0,"token":"0123456789abcdef"}`, 0, "pid 0"},
		{"pid negative", `{"pid":-1,"token":"0123456789abcdef"}`, 0, "pid -1"},
		{"pid huge", `{"pid":99999999999,"token":"0123456789abcdef"}`, 0, "cannot name a process"},
		{"pid beyond int64", `{"pid":1e40,"token":"0123456789abcdef"}`, 0, "cannot unmarshal"},
		{"no token", `{"pid":42}`, 0, "not 16 lowercase hex digits"},
		{"token naming a path", `{"pid":42,"token":"/../../secret/victim"}`, 0, "not 16 lowercase hex digits"},
		{"token with a slash in 16 bytes", `{"pid":42,"token":"0123456789ab/..."}`, 0, "not 16 lowercase hex digits"},
		{"token in upper case", `{"pid":42,"token":"0123456789ABCDEF"}`, 0, "not 16 lowercase hex digits"},
		{"token too short", `{"pid":42,"token":"0123456789abcde"}`, 0, "not 16 lowercase hex digits"},
		{"token too long", `{"pid":42,"token":"0123456789abcdef0"}`, 0, "not 16 lowercase hex digits"},
		{"token with a NUL", `{"pid":42,"token":"0123456789abcde\u0000"}`, 0, "not 16 lowercase hex digits"},
		{"keys match exactly, as in JavaScript", `{"pid":111,"token":"0123456789abcdef","PID":222}`, 111, ""},
		{"only a differently cased pid", `{"PID":222,"token":"0123456789abcdef"}`, 0, "pid 0"},
		{"vertical tab is not JSON space", "\v{\"pid\":7,\"token\":\"t\"}", 0, "invalid character"},
		{"negative childPgid", `{"pid":42,"token":"0123456789abcdef","childPgid":-5}`, 0, "childPgid"},
		{"too large", `{"pid":42,"token":"0123456789abcdef","pad":"` + strings.Repeat("x", maxRecordSize) + `"}`, 0, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info, err := parseRecord([]byte(tt.content))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseRecord: %v", err)
				}
				if info.PID != tt.wantPID {
					t.Fatalf("pid = %d, want %d", info.PID, tt.wantPID)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseRecord succeeded with %+v, want error containing %q", info, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestEncodeIsSeedShaped(t *testing.T) {
	info := newInfo(Options{Owner: "channels", Slug: "ep12"})
	b := info.encode()
	if strings.ContainsAny(string(b), "\n") {
		t.Fatalf("record has a newline: %q", b)
	}
	// The seed's five fields come first, in the seed's order.
	if !regexp.MustCompile(`^\{"pid":\d+,"acquiredAt":"[^"]+","owner":"channels","slug":"ep12","token":"[0-9a-f]{16}"`).Match(b) {
		t.Fatalf("record does not start with the seed's fields: %s", b)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(info.AcquiredAt) {
		t.Fatalf("acquiredAt %q is not toISOString's form", info.AcquiredAt)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["pid"].(float64); !ok {
		t.Fatalf("pid is not a JSON number: %T", m["pid"])
	}
	back, err := parseRecord(b)
	if err != nil || *back != *info {
		t.Fatalf("round trip: %+v, %v; want %+v", back, err, info)
	}
}

func TestTokensDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := newToken()
		if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(tok) || seen[tok] {
			t.Fatalf("bad or repeated token %q", tok)
		}
		seen[tok] = true
	}
}

func TestPartialRecord(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    bool
	}{
		{"empty", "", true},
		{"blanks", " \n\t ", true},
		{"NUL bytes from a power loss", "\x00\x00\x00\x00", true},
		{"truncated record", `{"pid":4242,"acquiredAt":"2026-10`, true},
		{"truncated record, NUL padded", "{\"pid\":42\x00\x00", true},
		{"pid of the wrong type", `{"pid":"4242","token":"0123456789abcdef"}`, true},
		{"pid zero", `{"pid":0,"token":"0123456789abcdef"}`, true},
		{"token only", `{"token":"0123456789abcdef"}`, true},
		{"JSON object without pid or token", `{"name":"my-app","version":"1.0.0"}`, false},
		{"JSON array", `[1,2]`, false},
		{"text", "root:x:0:0:root:/root:/bin/bash\n", false},
		{"binary", "\x7fELF\x02\x01\x01", false},
		{"large truncated object", "{" + strings.Repeat(" ", maxPartialRecord), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := partialRecord([]byte(tt.content)); got != tt.want {
				t.Fatalf("partialRecord(%q) = %v, want %v", tt.content, got, tt.want)
			}
		})
	}
}
