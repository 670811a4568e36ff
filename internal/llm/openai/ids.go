package openai

import (
	"crypto/rand"
	"encoding/hex"
)

func randomHex() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
