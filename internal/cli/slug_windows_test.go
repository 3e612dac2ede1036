package cli

import "testing"

func TestCommandName(t *testing.T) {
	for _, tc := range []struct{ argv0, want string }{
		{`C:\Program Files\Blender Foundation\Blender 4.2\blender.exe`, "blender"},
		{`blender.EXE`, "blender"},
		{`render.bat`, "render"},
		{`D:\jobs\nightly.cmd`, "nightly"},
		{`render.ps1`, "render"},
		{`tool.com`, "tool"},
		{`render.py`, "render.py"},
		{`C:\tools\ffmpeg`, "ffmpeg"},
		{`.exe`, ".exe"},
		{`archive.tar.exe`, "archive.tar"},
	} {
		if got := commandName(tc.argv0); got != tc.want {
			t.Errorf("commandName(%q) = %q, want %q", tc.argv0, got, tc.want)
		}
	}
}
