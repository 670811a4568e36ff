package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/events"
)

func newCpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp NAME:PATH DEST",
		Short: "Copy an artifact a session stored (spec.outputs) to DEST (a file, a directory, or - for stdout)",
		Long: `Copy an artifact a session stored when its last input ended Succeeded: a file
matching spec.outputs, by its path relative to /workspace. It works after the
session and its pod are deleted, until the journal's retention ends.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, p, err := parseCpSource(args[0])
			if err != nil {
				return err
			}
			c, ns, err := g.kube()
			if err != nil {
				return err
			}
			ref, err := sessionRef(cmd.Context(), c, ns, name)
			if err != nil {
				return err
			}
			js, closeNATS, err := g.jetStream(cmd.Context(), ns)
			if err != nil {
				return err
			}
			defer closeNATS()
			return copyArtifact(cmd.Context(), js, ref, p, args[1], cmd.OutOrStdout())
		},
	}
}

// parseCpSource splits NAME:PATH; PATH is relative to /workspace (a
// leading /workspace/ is dropped) and must not leave it.
func parseCpSource(s string) (string, string, error) {
	name, p, ok := strings.Cut(s, ":")
	if !ok || name == "" || p == "" {
		return "", "", fmt.Errorf("cp: the source must be NAME:PATH, e.g. my-session:out/report.md")
	}
	p = strings.TrimPrefix(p, "/workspace/")
	p = path.Clean(p)
	if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || p == "." {
		return "", "", fmt.Errorf("cp: PATH %q must be a file relative to /workspace", p)
	}
	return name, p, nil
}

// copyArtifact writes the artifact p of ref to dest: "-" is stdout, an
// existing directory gets the file under its base name.
func copyArtifact(ctx context.Context, js jetstream.JetStream, ref events.SessionRef, p, dest string, stdout io.Writer) error {
	data, err := events.ReadChanges(ctx, js, ref, changes.ArtifactPrefix+p)
	if err != nil {
		return fmt.Errorf("cp %s:%s: %w (only files matching spec.outputs are stored)", ref.Name, p, err)
	}
	if dest == "-" {
		_, err := stdout.Write(data)
		return err
	}
	if st, err := os.Stat(dest); err == nil && st.IsDir() {
		dest = filepath.Join(dest, path.Base(p))
	}
	if err := os.WriteFile(dest, data, 0o644); err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	return nil
}
