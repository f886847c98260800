package serve

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOrigin(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://127.0.0.1:8420", "http://127.0.0.1:8420"},
		{"http://127.0.0.1:8420/ui/", "http://127.0.0.1:8420"},
		{"HTTP://LocalHost:8420", "http://localhost:8420"},
		{"https://keel.example.com", "https://keel.example.com:443"},
		{"http://[::1]:9", "http://[::1]:9"},
		{"ftp://host", ""},
		{"127.0.0.1:8420", ""},
		{"", ""},
	} {
		if got := Origin(tt.in); got != tt.want {
			t.Errorf("Origin(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A second server from the same home keeps the first one's token for
// the first one's URLs; a server that takes over a URL takes it from the
// older entry.
func TestTokensFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", "server-token")
	a := Tokens{Servers: []string{"http://127.0.0.1:1", "http://localhost:1"}, Token: "A"}
	st := (&Tokens{}).with(a)
	st = st.with(Tokens{Servers: []string{"http://127.0.0.1:2"}, Token: "B"})
	if err := writeTokens(path, st); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi, err)
	}
	got, err := ReadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	for url, want := range map[string]string{"http://127.0.0.1:2/": "B", "http://LOCALHOST:1": "A", "http://127.0.0.1:3": ""} {
		var tok string
		if e := got.Lookup(url); e != nil {
			tok = e.Token
		}
		if tok != want {
			t.Errorf("Lookup(%s) = %q, want %q", url, tok, want)
		}
	}
	if d := cmp.Diff([]string{"http://127.0.0.1:2", "http://127.0.0.1:1", "http://localhost:1"}, got.AllServers()); d != "" {
		t.Errorf("AllServers (-want +got):\n%s", d)
	}
	// B's server restarts on A's first URL: A keeps only its other one.
	got = got.with(Tokens{Servers: []string{"http://127.0.0.1:1"}, Token: "B"})
	if d := cmp.Diff(&Tokens{Servers: []string{"http://127.0.0.1:1"}, Token: "B", Others: []Tokens{{Servers: []string{"http://localhost:1"}, Token: "A"}}}, got); d != "" {
		t.Errorf("after a restart (-want +got):\n%s", d)
	}
	// A file of an older keel (the token alone) is bound to no server.
	os.WriteFile(path, []byte("T0\n"), 0o600)
	if old, err := ReadTokens(path); err != nil || old.Token != "T0" || old.Lookup("http://127.0.0.1:1") != nil {
		t.Errorf("old file: %+v %v", old, err)
	}
}

func TestURLs(t *testing.T) {
	for _, tt := range []struct {
		ip      string
		urls    []string
		exposed bool
	}{
		{"127.0.0.1", []string{"http://127.0.0.1:8420", "http://localhost:8420"}, false},
		{"0.0.0.0", []string{"http://127.0.0.1:8420", "http://localhost:8420", "http://[::1]:8420"}, true},
		{"::", []string{"http://127.0.0.1:8420", "http://localhost:8420", "http://[::1]:8420"}, true},
		{"192.0.2.7", []string{"http://192.0.2.7:8420"}, true},
	} {
		urls, exposed := URLs(&net.TCPAddr{IP: net.ParseIP(tt.ip), Port: 8420})
		if !cmp.Equal(urls, tt.urls) || exposed != tt.exposed {
			t.Errorf("URLs(%s) = %v %v, want %v %v", tt.ip, urls, exposed, tt.urls, tt.exposed)
		}
	}
}

func TestCheckRoots(t *testing.T) {
	home := t.TempDir()
	other := t.TempDir()
	os.Symlink(home, filepath.Join(other, "link"))
	db := filepath.Join(home, "keel.db")
	files := JournalFiles(db)
	if len(files) != 5 || files[0] != db {
		t.Errorf("JournalFiles(%s) = %v", db, files)
	}
	if f := JournalFiles("postgres://keel@h/db"); f != nil {
		t.Errorf("JournalFiles(postgres) = %v, want none", f)
	}
	for _, tt := range []struct {
		root string
		ok   bool
	}{
		{other, true},
		{home, false},
		{filepath.Join(other, "link"), false}, // a link to the home
	} {
		err := CheckRoots([]string{tt.root}, []string{home}, files)
		if (err == nil) != tt.ok {
			t.Errorf("CheckRoots(%s) = %v, want ok %v", tt.root, err, tt.ok)
		}
	}
	if !UnderRoot(filepath.Join(other, "a"), []string{other}) || UnderRoot(home, []string{other}) || UnderRoot(home, nil) {
		t.Error("UnderRoot")
	}
}
