package aauth

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

const pemTypePrivateKey = "PRIVATE KEY"

// LoadKey reads an Ed25519 private key stored as PKCS#8 PEM ("PRIVATE KEY").
func LoadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("aauth: reading key: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return k, nil
}

// MarshalKey encodes key as PKCS#8 PEM ("PRIVATE KEY").
func MarshalKey(key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("aauth: not an Ed25519 private key")
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("aauth: encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemTypePrivateKey, Bytes: der}), nil
}

// ParseKey decodes an Ed25519 private key from PKCS#8 PEM ("PRIVATE KEY").
// Anything else is refused with an error saying what was found.
func ParseKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(pemBytes)
	switch {
	case block == nil:
		return nil, errors.New("aauth: key: not a PEM file (no PEM block)")
	case block.Type != pemTypePrivateKey:
		return nil, fmt.Errorf("aauth: key: PEM block is %q, want %q (PKCS#8)", block.Type, pemTypePrivateKey)
	}
	if next, _ := pem.Decode(rest); next != nil {
		return nil, errors.New("aauth: key: more than one PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("aauth: key: not PKCS#8: %w", err)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("aauth: key: a %T, want an Ed25519 key", k)
	}
	return ed, nil
}
