package auditlog

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/keyring"
)

// Checkpoint is a tree head: the log's name (its origin), its size and its
// root hash. Its text form is C2SP tlog-checkpoint's:
//
//	kin.host/log/4c1f0a2e
//	1024
//	bW9yZSB0aGFuIDMyIGJ5dGVzIG9mIGJhc2U2NCBoYXNo
//
// and kin signs that text as a note with its log key.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// Text is the checkpoint's text, each line ending in a newline.
func (c Checkpoint) Text() string {
	return c.Origin + "\n" + strconv.FormatInt(c.Size, 10) + "\n" + base64.StdEncoding.EncodeToString(c.Root[:]) + "\n"
}

// ParseCheckpoint reads a checkpoint's text. Lines after the root hash are
// extensions, which C2SP allows and kin ignores (it writes none).
func ParseCheckpoint(text string) (Checkpoint, error) {
	if !strings.HasSuffix(text, "\n") {
		return Checkpoint{}, errors.New("checkpoint: text must end in a newline")
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 3 {
		return Checkpoint{}, fmt.Errorf("checkpoint: %d lines, want origin, size and root hash", len(lines))
	}
	c := Checkpoint{Origin: lines[0]}
	if c.Origin == "" {
		return Checkpoint{}, errors.New("checkpoint: empty origin line")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("checkpoint: size %q is not a non-negative decimal number", lines[1])
	}
	c.Size = n
	// The decoder skips CR and LF, so compare the re-encoding too: a root
	// line has exactly one spelling, as the size line has.
	h, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(h) != tlog.HashSize || base64.StdEncoding.EncodeToString(h) != lines[2] {
		return Checkpoint{}, fmt.Errorf("checkpoint: root hash %q is not %d bytes of base64", lines[2], tlog.HashSize)
	}
	copy(c.Root[:], h)
	return c, nil
}

// Key is the log's signing key.
type Key struct {
	signer note.Signer
	vkey   string
	skey   string
}

// Derive is a secret of the key's holders for another use than signing
// (label names it): HMAC-SHA256 of label keyed with the private key, from
// which the key cannot be learnt. The hosts of a fleet share one log key
// and nothing else secret, so they authenticate their calls to one
// another with Derive (package peer).
func (k *Key) Derive(label string) []byte {
	m := hmac.New(sha256.New, []byte(k.skey))
	m.Write([]byte("kin log key derive\x00" + label))
	return m.Sum(nil)
}

// Name is the key's name, which is also the log's origin.
func (k *Key) Name() string { return k.signer.Name() }

// VerifierKey is the public key in note's text form (name+hash+key), the
// only thing a third party needs to check the log.
func (k *Key) VerifierKey() string { return k.vkey }

// Sign signs c as a note; c.Origin must be the key's name.
func (k *Key) Sign(c Checkpoint) ([]byte, error) {
	if c.Origin != k.Name() {
		return nil, fmt.Errorf("checkpoint: origin %q is not the log key's name %q", c.Origin, k.Name())
	}
	return note.Sign(&note.Note{Text: c.Text()}, k.signer)
}

// NewVerifier reads a log's public key (note's name+hash+key form).
func NewVerifier(vkey string) (note.Verifier, error) {
	if strings.HasPrefix(strings.TrimSpace(vkey), "PRIVATE+") {
		// Do not echo a private key into an error message.
		return nil, errors.New("log key: that is the private key (log.key); give the public name+hash+key line `kin log key` prints")
	}
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, fmt.Errorf("log key %q: %w (want the name+hash+key line `kin log key` prints)", abbreviate(vkey), err)
	}
	return v, nil
}

// OpenCheckpoint checks a signed checkpoint against the log's key and
// returns it. The note must carry a signature by that key, and the
// checkpoint's origin must be the key's name.
func OpenCheckpoint(msg []byte, v note.Verifier) (Checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		switch {
		case errors.As(err, &unverified):
			return Checkpoint{}, fmt.Errorf("checkpoint is not signed by the log key %s", v.Name())
		case errors.As(err, &invalid):
			return Checkpoint{}, fmt.Errorf("checkpoint's signature by %s does not verify: it was altered or forged", v.Name())
		}
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != v.Name() {
		return Checkpoint{}, fmt.Errorf("checkpoint is for log %q, not %q", c.Origin, v.Name())
	}
	return c, nil
}

// Key files inside the key directory.
const (
	fileKey    = "log.key" // note's PRIVATE+KEY+... line, 0600
	filePublic = "log.pub" // the verifier key, for operators to hand out
)

var nameUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// LoadKey loads the log key from dir, creating dir (0700) and a key named
// kin.<host>/log/<8 hex digits> when there is none. The key never rotates:
// every checkpoint ever signed stays checkable with the one public key.
func LoadKey(dir string) (*Key, error) {
	if err := keyring.PrivateDir(dir); err != nil {
		return nil, fmt.Errorf("log key: %w", err)
	}
	skey, err := keyring.ReadPrivate(filepath.Join(dir, fileKey))
	if errors.Is(err, os.ErrNotExist) {
		return createKey(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("log key: %w", err)
	}
	return parseKey(string(skey))
}

func createKey(dir string) (*Key, error) {
	host, _ := os.Hostname()
	host = strings.Trim(nameUnsafe.ReplaceAllString(host, "-"), "-")
	if host == "" {
		host = "localhost"
	}
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("kin.%s/log/%x", host, id)
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return nil, fmt.Errorf("log key: %w", err)
	}
	now := time.Now()
	if err := keyring.WritePrivate(filepath.Join(dir, fileKey), []byte(skey+"\n"), now); err != nil {
		return nil, fmt.Errorf("log key: %w", err)
	}
	if err := keyring.WritePrivate(filepath.Join(dir, filePublic), []byte(vkey+"\n"), now); err != nil {
		return nil, fmt.Errorf("log key: %w", err)
	}
	return parseKey(skey)
}

func parseKey(skey string) (*Key, error) {
	skey = strings.TrimSpace(skey)
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("log key: %w", err)
	}
	// The private key line is PRIVATE+KEY+name+hash+key; the public one is
	// derived from it (never read from log.pub, which anyone may edit).
	vkey, err := verifierFromSigner(skey)
	if err != nil {
		return nil, err
	}
	return &Key{signer: s, vkey: vkey, skey: skey}, nil
}

func abbreviate(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

// verifierFromSigner derives the public verifier key from note's private key
// line, PRIVATE+KEY+name+hash+base64(alg || seed).
func verifierFromSigner(skey string) (string, error) {
	// The key is standard base64, which may itself hold '+': split off the
	// four fields before it only.
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 || parts[0] != "PRIVATE" || parts[1] != "KEY" {
		return "", errors.New("log key: not a note private key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("log key: not an Ed25519 note private key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[2], pub)
}
