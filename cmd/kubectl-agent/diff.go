package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/events/render"
)

type diffOptions struct {
	stat  bool
	color string // auto, always, never
}

func newDiffCmd(g *globals) *cobra.Command {
	o := &diffOptions{}
	cmd := &cobra.Command{
		Use:   "diff NAME",
		Short: "Print the change a session made (the stored patch base..head), also after the session is deleted",
		Long: `Print the change a session made in its workspace, as recorded when its last input
ended Succeeded: git diff --binary --full-index --no-renames base..head, byte for byte
when the output is not a terminal (so it can be piped to git apply). On a terminal
the patch is coloured and control characters are made visible. --stat prints the
summary of status.changes instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			ref, err := sessionRef(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			js, closeNATS, err := g.jetStream(cmd.Context(), ns)
			if err != nil {
				return err
			}
			defer closeNATS()
			return runDiff(cmd.Context(), js, ref, cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().BoolVar(&o.stat, "stat", false, "print the changed files and line counts instead of the patch")
	cmd.Flags().StringVar(&o.color, "color", "auto", "colour the patch: auto (on a terminal), always or never")
	return cmd
}

// jetStream connects to the events server for namespace (see globals.nats).
func (g *globals) jetStream(ctx context.Context, namespace string) (jetstream.JetStream, func(), error) {
	nc, closeNATS, err := g.nats(ctx, namespace)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		closeNATS()
		return nil, nil, fmt.Errorf("open jetstream: %w", err)
	}
	return js, closeNATS, nil
}

// readChanges reads one object of ref's recorded changes, saying clearly
// when there are none (the error then wraps events.ErrNoChanges).
func readChanges(ctx context.Context, js jetstream.JetStream, ref events.SessionRef, object string) ([]byte, error) {
	data, err := events.ReadChanges(ctx, js, ref, object)
	if errors.Is(err, events.ErrNoChanges) {
		return nil, noChangesError{ref: ref}
	}
	return data, err
}

// noChangesError says that a session has no recorded changes.
type noChangesError struct{ ref events.SessionRef }

func (e noChangesError) Error() string {
	return fmt.Sprintf("agentsession %s has no recorded changes (none yet: they are recorded when an input ends Succeeded; or older than the journal's retention)", e.ref)
}

func (e noChangesError) Unwrap() error { return events.ErrNoChanges }

// readPatch reads ref's recorded patch (git diff --binary --full-index
// --no-renames base..head) as diff prints it and the console serves it.
func readPatch(ctx context.Context, js jetstream.JetStream, ref events.SessionRef) ([]byte, error) {
	return readChanges(ctx, js, ref, changes.PatchObject)
}

func runDiff(ctx context.Context, js jetstream.JetStream, ref events.SessionRef, out io.Writer, o *diffOptions) error {
	if o.stat {
		data, err := readChanges(ctx, js, ref, changes.SummaryObject)
		if err != nil {
			return err
		}
		var c v1alpha1.Changes
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("read changes of %s: %w", ref, err)
		}
		return printStat(render.NewWriter(out), &c)
	}
	patch, err := readPatch(ctx, js, ref)
	if err != nil {
		return err
	}
	switch o.color {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("diff: --color must be auto, always or never, not %q", o.color)
	}
	tty := isTerminal(out)
	color := o.color == "always" || (o.color == "auto" && tty)
	if !color && !tty {
		_, err := out.Write(patch) // byte for byte: git apply takes it
		return err
	}
	return printColored(out, patch, color)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ANSI colours of a patch, as git diff uses them.
const (
	ansiReset = "\x1b[m"
	ansiBold  = "\x1b[1m"
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiCyan  = "\x1b[36m"
)

// printColored prints patch for people: each line's text sanitized
// (control characters of the model's files made visible), coloured when
// color is set.
func printColored(out io.Writer, patch []byte, color bool) error {
	w := bufio.NewWriter(out)
	for line := range bytes.Lines(patch) {
		text := render.Sanitize(strings.TrimSuffix(string(line), "\n"))
		code := ""
		switch {
		case !color:
		case strings.HasPrefix(text, "diff --git "), strings.HasPrefix(text, "index "),
			strings.HasPrefix(text, "--- "), strings.HasPrefix(text, "+++ "),
			strings.HasPrefix(text, "new file mode"), strings.HasPrefix(text, "deleted file mode"):
			code = ansiBold
		case strings.HasPrefix(text, "@@"):
			code = ansiCyan
		case strings.HasPrefix(text, "+"):
			code = ansiGreen
		case strings.HasPrefix(text, "-"):
			code = ansiRed
		}
		if code != "" {
			text = code + text + ansiReset
		}
		if _, err := w.WriteString(text + "\n"); err != nil {
			return err
		}
	}
	return w.Flush()
}

// printStat prints status.changes like git diff --stat.
func printStat(w io.Writer, c *v1alpha1.Changes) error {
	width := 0
	for _, f := range c.Files {
		width = max(width, len(f.Path))
	}
	for _, f := range c.Files {
		counts := fmt.Sprintf("+%d -%d", f.Insertions, f.Deletions)
		if f.Binary {
			counts = "Bin"
		}
		if _, err := fmt.Fprintf(w, " %-1s %-*s | %s\n", f.Status, width, f.Path, counts); err != nil {
			return err
		}
	}
	if c.FilesTruncated {
		fmt.Fprintf(w, " ... %d more files\n", c.FilesChanged-int64(len(c.Files)))
	}
	fmt.Fprintf(w, " %d files changed, %d insertions(+), %d deletions(-)\n", c.FilesChanged, c.Insertions, c.Deletions)
	where := "base " + shortID(c.Base) + ", head " + shortID(c.Head)
	if c.Branch != "" {
		where += ", branch " + c.Branch
		if c.Pushed {
			where += " (pushed)"
		}
	}
	_, err := fmt.Fprintln(w, " "+where)
	return err
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
