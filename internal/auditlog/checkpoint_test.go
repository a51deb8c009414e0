package auditlog

import (
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func randomHash(r *rand.Rand) tlog.Hash {
	var h tlog.Hash
	for i := range h {
		h[i] = byte(r.UintN(256))
	}
	return h
}

func TestCheckpointTextRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 3))
	c := Checkpoint{Origin: "kin.host/log/4c1f0a2e", Size: 1024, Root: tlog.RecordHash([]byte("x"))}
	want := "kin.host/log/4c1f0a2e\n1024\n" + base64.StdEncoding.EncodeToString(c.Root[:]) + "\n"
	if c.Text() != want {
		t.Fatalf("Text() = %q, want %q", c.Text(), want)
	}
	for _, size := range []int64{0, 1, 2, 7, 1 << 20, 1<<63 - 1, r.Int64()} {
		c := Checkpoint{Origin: "kin.example/log/0001", Size: size, Root: randomHash(r)}
		got, err := ParseCheckpoint(c.Text())
		if err != nil {
			t.Fatalf("ParseCheckpoint(%q): %v", c.Text(), err)
		}
		if got != c {
			t.Fatalf("ParseCheckpoint(%q) = %+v, want %+v", c.Text(), got, c)
		}
	}
	// Extension lines are allowed and ignored.
	got, err := ParseCheckpoint(c.Text() + "ext one\next two\n")
	if err != nil || got != c {
		t.Fatalf("with extensions: %+v, %v, want %+v", got, err, c)
	}
}

func TestParseCheckpointRefuses(t *testing.T) {
	root := base64.StdEncoding.EncodeToString(make([]byte, 32))
	short := base64.StdEncoding.EncodeToString(make([]byte, 31))
	long := base64.StdEncoding.EncodeToString(make([]byte, 33))
	nonCanonical := root[:len(root)-2] + "B=" // padding bits set
	tests := []struct{ name, text, msg string }{
		{"missing newline", "o\n1\n" + root, "newline"},
		{"two lines", "o\n1\n", "lines"},
		{"one line", "o\n", "lines"},
		{"empty", "", "newline"},
		{"empty origin", "\n1\n" + root + "\n", "origin"},
		{"size -1", "o\n-1\n" + root + "\n", "size"},
		{"size 01", "o\n01\n" + root + "\n", "size"},
		{"size x", "o\nx\n" + root + "\n", "size"},
		{"size +1", "o\n+1\n" + root + "\n", "size"},
		{"size -0", "o\n-0\n" + root + "\n", "size"},
		{"size empty", "o\n\n" + root + "\n", "size"},
		{"size with space", "o\n 1\n" + root + "\n", "size"},
		{"size overflows", "o\n9223372036854775808\n" + root + "\n", "size"},
		{"bad base64", "o\n1\n!!notbase64!!\n", "root hash"},
		{"unpadded base64", "o\n1\n" + strings.TrimRight(root, "=") + "\n", "root hash"},
		{"padding bits set", "o\n1\n" + nonCanonical + "\n", "root hash"},
		{"hash of 31 bytes", "o\n1\n" + short + "\n", "root hash"},
		{"hash of 33 bytes", "o\n1\n" + long + "\n", "root hash"},
		{"hash with CR", "o\n1\n" + root + "\r\n", "root hash"},
		{"hash with inner CR", "o\n1\n" + root[:10] + "\r" + root[10:] + "\n", "root hash"},
		{"empty hash", "o\n1\n\n", "root hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCheckpoint(tt.text)
			if err == nil {
				t.Fatalf("ParseCheckpoint(%q) = %+v, want an error", tt.text, c)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("ParseCheckpoint(%q): error %q does not mention %q", tt.text, err, tt.msg)
			}
		})
	}
}

var keyName = regexp.MustCompile(`^kin\.[A-Za-z0-9.-]+/log/[0-9a-f]{8}$`)

func TestLoadKeyCreatesAndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys", "log")
	k1, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !keyName.MatchString(k1.Name()) {
		t.Errorf("key name %q is not kin.<host>/log/<8 hex>", k1.Name())
	}
	if !strings.HasPrefix(k1.VerifierKey(), k1.Name()+"+") {
		t.Errorf("verifier key %q does not start with the name", k1.VerifierKey())
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("key dir: %v, %v, want mode 0700", fi.Mode(), err)
	}
	fi, err = os.Lstat(filepath.Join(dir, "log.key"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log.key: %v, %v, want a regular file of mode 0600", fi, err)
	}
	skey, err := os.ReadFile(filepath.Join(dir, "log.key"))
	if err != nil || !strings.HasPrefix(string(skey), "PRIVATE+KEY+"+k1.Name()+"+") {
		t.Fatalf("log.key holds %q (%v)", skey, err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "log.pub"))
	if err != nil || string(pub) != k1.VerifierKey()+"\n" {
		t.Fatalf("log.pub holds %q (%v), want %q", pub, err, k1.VerifierKey()+"\n")
	}

	k2, err := LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if k2.VerifierKey() != k1.VerifierKey() || k2.Name() != k1.Name() {
		t.Fatalf("reloaded key %q, created %q", k2.VerifierKey(), k1.VerifierKey())
	}
	// The public key is derived from the private one, not read from
	// log.pub, which anyone may edit.
	other, err := LoadKey(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log.pub"), []byte(other.VerifierKey()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k3, err := LoadKey(dir)
	if err != nil || k3.VerifierKey() != k1.VerifierKey() {
		t.Fatalf("with an edited log.pub: %v, %v", k3, err)
	}
	// A checkpoint signed with the reloaded key opens with the first's
	// verifier.
	v, err := NewVerifier(k1.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	c := Checkpoint{Origin: k2.Name(), Size: 3, Root: tlog.RecordHash([]byte("r"))}
	msg, err := k2.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenCheckpoint(msg, v); err != nil || got != c {
		t.Fatalf("OpenCheckpoint = %+v, %v", got, err)
	}
}

func TestLoadKeyRefusesReadableKeyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "k")
	if _, err := LoadKey(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "log.key")
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if k, err := LoadKey(dir); err == nil {
			t.Fatalf("LoadKey with log.key of mode %v = %v, want an error", mode, k.Name())
		} else if !strings.Contains(err.Error(), "only its owner") {
			t.Fatalf("mode %v: error %q does not say why", mode, err)
		}
	}
}

func TestLoadKeyRefusesSymlinkedKeyFile(t *testing.T) {
	real := filepath.Join(t.TempDir(), "real")
	k, err := LoadKey(real)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "linked")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "log.key")
	if err := os.Symlink(filepath.Join(real, "log.key"), link); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadKey(dir); err == nil {
		t.Fatalf("LoadKey through a symlinked log.key = %v (the real key is %v), want an error", got.Name(), k.Name())
	}
	// A dangling link is refused too, and no key is created through it.
	dangling := filepath.Join(t.TempDir(), "dangling")
	if err := os.Mkdir(dangling, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "target.key")
	if err := os.Symlink(target, filepath.Join(dangling, "log.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(dangling); err == nil {
		t.Fatalf("LoadKey through a dangling symlink succeeded")
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Fatalf("LoadKey wrote a key through a dangling symlink (%v)", err)
	}
}

func TestLoadKeyRefusesOpenDir(t *testing.T) {
	for _, mode := range []os.FileMode{0o750, 0o710, 0o705, 0o755, 0o777} {
		dir := filepath.Join(t.TempDir(), "k")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(dir); err == nil {
			t.Fatalf("LoadKey in a dir of mode %v succeeded", mode)
		} else if !strings.Contains(err.Error(), "only its owner") {
			t.Fatalf("mode %v: error %q does not say why", mode, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "log.key")); !os.IsNotExist(err) {
			t.Fatalf("LoadKey created a key in a dir of mode %v", mode)
		}
	}
	// A symlink to a private directory is refused as well.
	real := filepath.Join(t.TempDir(), "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(link); err == nil {
		t.Fatal("LoadKey through a symlinked dir succeeded")
	}
}

// TestLoadKeyWithPlusInKey checks keys whose base64 holds '+': the key line
// must not be split there (a bug made about half of all new keys fail to
// load).
func TestLoadKeyWithPlusInKey(t *testing.T) {
	seed := [32]byte{1}
	rng := rand.NewChaCha8(seed)
	var withPlus int
	for i := range 64 {
		skey, vkey, err := note.GenerateKey(rng, "kin.test/log/0000000a")
		if err != nil {
			t.Fatal(err)
		}
		k, err := parseKey(skey)
		if err != nil {
			t.Fatalf("key %d (%s): %v", i, skey, err)
		}
		if k.VerifierKey() != vkey {
			t.Fatalf("key %d: verifier %q, want %q", i, k.VerifierKey(), vkey)
		}
		if strings.Count(skey, "+") <= 4 {
			continue
		}
		withPlus++
		if withPlus > 1 {
			continue
		}
		// And through LoadKey, from a file.
		dir := filepath.Join(t.TempDir(), "k")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "log.key"), []byte(skey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		k, err = LoadKey(dir)
		if err != nil || k.VerifierKey() != vkey || k.Name() != "kin.test/log/0000000a" {
			t.Fatalf("LoadKey of %q: %v, %v", skey, k, err)
		}
	}
	if withPlus == 0 {
		t.Fatal("no generated key held a '+'; the test proves nothing")
	}
}

func TestLoadKeyRefusesBadKeyFile(t *testing.T) {
	for _, content := range []string{"", "garbage\n", "PRIVATE+KEY+x+00000000+AAAA\n"} {
		dir := filepath.Join(t.TempDir(), "k")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "log.key"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(dir); err == nil {
			t.Fatalf("LoadKey of log.key %q succeeded", content)
		}
	}
}

func TestSignOpenCheckpoint(t *testing.T) {
	key, err := LoadKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(key.VerifierKey() + "\n") // as read from log.pub
	if err != nil {
		t.Fatal(err)
	}
	if v.Name() != key.Name() {
		t.Fatalf("verifier name %q, key name %q", v.Name(), key.Name())
	}
	r := rand.New(rand.NewPCG(5, 5))
	for _, size := range []int64{0, 1, 500, 1<<40 + 3} {
		c := Checkpoint{Origin: key.Name(), Size: size, Root: randomHash(r)}
		msg, err := key.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(msg), c.Text()+"\n— "+key.Name()+" ") {
			t.Fatalf("signed note %q does not hold the checkpoint text and a signature line", msg)
		}
		got, err := OpenCheckpoint(msg, v)
		if err != nil || got != c {
			t.Fatalf("OpenCheckpoint = %+v, %v, want %+v", got, err, c)
		}
	}
	// Sign refuses a checkpoint of another origin.
	if msg, err := key.Sign(Checkpoint{Origin: "kin.other/log/00000000", Size: 1}); err == nil {
		t.Fatalf("Sign of another origin = %q", msg)
	}
}

func TestOpenCheckpointRefuses(t *testing.T) {
	key, err := LoadKey(filepath.Join(t.TempDir(), "k"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(key.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	c := Checkpoint{Origin: key.Name(), Size: 42, Root: tlog.RecordHash([]byte("root"))}
	good, err := key.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{7})

	t.Run("another key of the same name", func(t *testing.T) {
		skey, _, err := note.GenerateKey(rng, key.Name())
		if err != nil {
			t.Fatal(err)
		}
		s, err := note.NewSigner(skey)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := note.Sign(&note.Note{Text: c.Text()}, s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = OpenCheckpoint(msg, v)
		if err == nil || !strings.Contains(err.Error(), "not signed by the log key") {
			t.Fatalf("OpenCheckpoint of a note by another key: %v", err)
		}
	})
	t.Run("another key of another name", func(t *testing.T) {
		other, err := LoadKey(filepath.Join(t.TempDir(), "k"))
		if err != nil {
			t.Fatal(err)
		}
		msg, err := other.Sign(Checkpoint{Origin: other.Name(), Size: c.Size, Root: c.Root})
		if err != nil {
			t.Fatal(err)
		}
		_, err = OpenCheckpoint(msg, v)
		if err == nil || !strings.Contains(err.Error(), "not signed by the log key") {
			t.Fatalf("OpenCheckpoint of a note by another log's key: %v", err)
		}
	})
	t.Run("altered text", func(t *testing.T) {
		msg := strings.Replace(string(good), "\n42\n", "\n43\n", 1)
		if msg == string(good) {
			t.Fatal("no change")
		}
		_, err := OpenCheckpoint([]byte(msg), v)
		if err == nil || !strings.Contains(err.Error(), "does not verify") {
			t.Fatalf("OpenCheckpoint of an altered note: %v", err)
		}
	})
	t.Run("altered signature", func(t *testing.T) {
		b := []byte(string(good))
		// A base64 character well inside the signature: every one of its
		// six bits is signature (the last ones before "=" are partly
		// padding, which decoding ignores, so changing them may change
		// nothing).
		i := len(b) - 10
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		if _, err := OpenCheckpoint(b, v); err == nil {
			t.Fatal("OpenCheckpoint of a note with an altered signature succeeded")
		}
	})
	t.Run("origin is not the key's name", func(t *testing.T) {
		// A key named otherwise signs a checkpoint that claims the log's
		// origin; its own verifier checks the signature, and the origin
		// must still be refused.
		skey, vkey, err := note.GenerateKey(rng, "kin.impostor/log/00000001")
		if err != nil {
			t.Fatal(err)
		}
		s, err := note.NewSigner(skey)
		if err != nil {
			t.Fatal(err)
		}
		ov, err := NewVerifier(vkey)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := note.Sign(&note.Note{Text: c.Text()}, s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = OpenCheckpoint(msg, ov)
		if err == nil || !strings.Contains(err.Error(), "is for log") || !strings.Contains(err.Error(), key.Name()) {
			t.Fatalf("OpenCheckpoint of a checkpoint whose origin is not the key's name: %v", err)
		}
	})
	t.Run("signed text is not a checkpoint", func(t *testing.T) {
		msg, err := note.Sign(&note.Note{Text: "hello\n"}, key.signer)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := OpenCheckpoint(msg, v); err == nil || !strings.Contains(err.Error(), "checkpoint") {
			t.Fatalf("OpenCheckpoint of a signed non-checkpoint: %v", err)
		}
	})
	for _, garbage := range []string{"", "garbage", "garbage\n\n— x AAAA\n", c.Text(), c.Text() + "\n"} {
		if got, err := OpenCheckpoint([]byte(garbage), v); err == nil {
			t.Fatalf("OpenCheckpoint(%q) = %+v, want an error", garbage, got)
		}
	}
}

func TestNewVerifierGarbage(t *testing.T) {
	for _, vkey := range []string{"", "garbage", "kin.x/log/1+zzzz+AAAA", "a+00000000+" + base64.StdEncoding.EncodeToString([]byte{1, 2, 3})} {
		v, err := NewVerifier(vkey)
		if err == nil {
			t.Fatalf("NewVerifier(%q) = %v, want an error", vkey, v.Name())
		}
		if !strings.Contains(err.Error(), "log key") || !strings.Contains(err.Error(), "name+hash+key") || !strings.Contains(err.Error(), vkey) {
			t.Fatalf("NewVerifier(%q): error %q does not name the problem", vkey, err)
		}
	}
	// A private key is refused without being echoed.
	skey, _, err := note.GenerateKey(rand.NewChaCha8([32]byte{9}), "kin.x/log/00000002")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewVerifier(skey)
	if err == nil {
		t.Fatal("NewVerifier accepted a private key")
	}
	secret := skey[strings.LastIndex(skey, "+")+1:]
	if strings.Contains(err.Error(), secret[:8]) || !strings.Contains(err.Error(), "private") {
		t.Fatalf("NewVerifier(private key): error %q", err)
	}
	// A long garbage key is abbreviated in the message.
	long := strings.Repeat("x", 200)
	if _, err := NewVerifier(long); err == nil || strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "...") {
		t.Fatalf("NewVerifier(200 x): %v", err)
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	h := tlog.RecordHash([]byte("x"))
	root := base64.StdEncoding.EncodeToString(h[:])
	f.Add("kin.host/log/4c1f0a2e\n1024\n" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + "\n")
	f.Add("o\n0\n" + root + "\n")
	f.Add("o\n1\n" + root + "\next\n")
	f.Add("o\n01\nAAAA\n")
	f.Add("o\n1\n" + root + "\r\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCheckpoint(text)
		if err != nil {
			return
		}
		if c.Origin == "" || c.Size < 0 {
			t.Fatalf("ParseCheckpoint(%q) = %+v", text, c)
		}
		if strings.Count(text, "\n") == 3 && c.Text() != text {
			t.Fatalf("ParseCheckpoint(%q) = %+v, whose Text() is %q", text, c, c.Text())
		}
		// The text it writes reads back to the same checkpoint.
		if again, err := ParseCheckpoint(c.Text()); err != nil || again != c {
			t.Fatalf("ParseCheckpoint(Text()) = %+v, %v, want %+v", again, err, c)
		}
	})
}
