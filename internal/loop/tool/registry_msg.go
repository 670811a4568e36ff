package tool

import (
	"strings"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

func joinPath(p []string) string { return strings.Join(p, "/") }

func joinLines(msgs []string) string { return strings.Join(msgs, "; ") }
