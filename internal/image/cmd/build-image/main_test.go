package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSourceDate(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Time
		bad  bool
	}{
		{env: "", want: time.Unix(0, 0)},
		{env: "1767225600", want: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{env: "2026-01-01", bad: true},
	} {
		t.Setenv("SOURCE_DATE_EPOCH", c.env)
		got, err := sourceDate()
		if c.bad {
			if err == nil {
				t.Errorf("SOURCE_DATE_EPOCH=%q taken as %v", c.env, got)
			}
			continue
		}
		if err != nil || !got.Equal(c.want) {
			t.Errorf("SOURCE_DATE_EPOCH=%q: %v, %v, want %v", c.env, got, err, c.want)
		}
	}
}

func TestRunRefuses(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	for what, c := range map[string]struct {
		args []string
		want string
	}{
		"no flags":         {nil, "required"},
		"no tag":           {[]string{"-binary", self, "-o", out}, "required"},
		"a bad tag":        {[]string{"-binary", self, "-tag", "storybus:two words", "-o", out}, "tag can only contain"},
		"a missing binary": {[]string{"-binary", filepath.Join(t.TempDir(), "none"), "-tag", "storybus:1", "-o", out}, "no such file"},
		"another program":  {[]string{"-binary", self, "-tag", "storybus:1", "-o", out}, "want github.com/storybus/storybus/cmd/storybus"},
	} {
		err := run(c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", what, err, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an image was written")
	}
}
