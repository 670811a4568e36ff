package profile

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// DocsBudget is the byte budget of project instructions (seed 000 §6.5).
const DocsBudget = 32 * 1024

// DocsTruncatedMarker ends project instructions cut at DocsBudget.
const DocsTruncatedMarker = "[Project instructions truncated at 32KB]"

// git is the snapshot taken at session start (seed 000 §6.4).
type git struct {
	isRepo    bool
	root      string
	branch    string
	modified  int
	untracked int
	commits   []string
}

// snapshotCommands are the git commands of the snapshot, in the order
// gitSnapshot runs them; the first failing means "not a git repository".
var snapshotCommands = []string{
	"git rev-parse --show-toplevel",
	"git rev-parse --abbrev-ref HEAD",
	"git status --porcelain",
	"git log --oneline -n 10",
}

// snapshotScript runs snapshotCommands in one shell, each followed by a NUL,
// its exit code and a NUL (git prints no NUL in these outputs: paths, ref
// names and one-line subjects cannot hold one), and stops after the first if
// it failed.
var snapshotScript = func() string {
	var b strings.Builder
	for i, c := range snapshotCommands {
		fmt.Fprintf(&b, "%s; c=$?; printf '\\0%%d\\0' \"$c\"\n", c)
		if i == 0 {
			b.WriteString("[ \"$c\" -eq 0 ] || exit 0\n")
		}
	}
	return b.String()
}()

// gitSnapshot takes the git snapshot through env in one command (one
// process start and one round trip instead of one per git command, on the
// path of every session's start); any failure means "not a git repository"
// or leaves a field empty. The commands share budget times their number; a
// snapshot cut by it keeps what finished.
func gitSnapshot(ctx context.Context, env tool.ExecutionEnvironment, budget time.Duration) git {
	var g git
	res, err := env.ExecCommand(ctx, snapshotScript, tool.ExecOptions{Timeout: budget * time.Duration(len(snapshotCommands))})
	if err != nil {
		return g
	}
	out := parseSnapshot(res.Stdout)
	root, ok := out[snapshotCommands[0]]
	if !ok {
		return g
	}
	g.isRepo, g.root = true, strings.TrimSpace(root)
	if b, ok := out[snapshotCommands[1]]; ok {
		g.branch = strings.TrimSpace(b)
	}
	if st, ok := out[snapshotCommands[2]]; ok {
		for _, l := range strings.Split(st, "\n") {
			switch {
			case l == "":
			case strings.HasPrefix(l, "??"):
				g.untracked++
			default:
				g.modified++
			}
		}
	}
	if log, ok := out[snapshotCommands[3]]; ok && log != "" {
		g.commits = strings.Split(log, "\n")
	}
	return g
}

// parseSnapshot returns the output of each of snapshotCommands that ran to
// the end and exited 0, without its trailing newlines.
func parseSnapshot(stdout string) map[string]string {
	out := map[string]string{}
	fields := strings.Split(stdout, "\x00")
	// Each command: its output, its exit code; a last, incomplete pair (cut
	// by the budget) is left out.
	for i := 0; i+2 < len(fields) && i/2 < len(snapshotCommands); i += 2 {
		if fields[i+1] == "0" {
			out[snapshotCommands[i/2]] = strings.TrimRight(fields[i], "\n")
		}
	}
	return out
}

func (g git) summary() string {
	if !g.isRepo {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n<git_snapshot>\n")
	fmt.Fprintf(&b, "Current branch: %s\n", g.branch)
	fmt.Fprintf(&b, "Status: %d modified, %d untracked\n", g.modified, g.untracked)
	if len(g.commits) > 0 {
		b.WriteString("Recent commits:\n")
		for _, c := range g.commits {
			b.WriteString("  " + c + "\n")
		}
	}
	b.WriteString("</git_snapshot>\nThis snapshot was taken at session start; run git commands for the current state.")
	return b.String()
}

// environmentBlock renders the <environment> block of seed 000 §6.3.
func environmentBlock(env tool.ExecutionEnvironment, g git, now time.Time, model string) string {
	branch := g.branch
	if !g.isRepo {
		branch = "(none)"
	}
	return fmt.Sprintf(`<environment>
Working directory: %s
Is git repository: %t
Git branch: %s
Platform: %s
OS version: %s
Today's date: %s
Model: %s
Knowledge cutoff: %s
</environment>`, env.WorkingDirectory(), g.isRepo, branch, env.Platform(), env.OSVersion(),
		now.Format("2006-01-02"), model, knowledgeCutoff(model))
}

// docReads reads instruction files through env, each path at most once,
// several at a time: each read is a round trip to the workspace, and the
// reads of one session's start do not depend on each other.
type docReads struct {
	ctx   context.Context
	env   tool.ExecutionEnvironment
	files []string
	slots chan struct{} // bounds the reads in flight
	mu    sync.Mutex
	reads map[string]*docRead // by path
}

// docRead is one instruction file's read; text is set when done closes.
type docRead struct {
	done chan struct{}
	text string
	ok   bool
}

// maxDocReads bounds the instruction file reads in flight at once.
const maxDocReads = 8

func newDocReads(ctx context.Context, env tool.ExecutionEnvironment, files []string) *docReads {
	return &docReads{ctx: ctx, env: env, files: files, slots: make(chan struct{}, maxDocReads), reads: map[string]*docRead{}}
}

// start starts reading the instruction files of dir that are not read
// yet. It waits while maxDocReads reads are in flight, so a deep working
// directory never has more reads (and goroutines) than that at once.
func (d *docReads) start(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range d.files {
		p := path.Join(dir, name)
		if d.reads[p] != nil {
			continue
		}
		r := &docRead{done: make(chan struct{})}
		d.reads[p] = r
		select {
		case d.slots <- struct{}{}:
		case <-d.ctx.Done():
			close(r.done) // not read: skipped like a missing file
			continue
		}
		go func() {
			defer close(r.done)
			defer func() { <-d.slots }()
			fc, err := d.env.ReadFile(d.ctx, p, tool.ReadOptions{MaxBytes: DocsBudget * 4})
			if err != nil || fc.Binary {
				return // missing, outside the workspace, too large: skip
			}
			r.text, r.ok = strings.TrimSpace(string(fc.Content)), true
		}()
	}
}

// join reads the instruction files of dirs (those not started yet too) and
// joins them in the order of dirs and files, within DocsBudget, named
// relative to root.
func (d *docReads) join(root string, dirs []string) string {
	for _, dir := range dirs {
		d.start(dir)
	}
	var b strings.Builder
	for _, dir := range dirs {
		for _, name := range d.files {
			p := path.Join(dir, name)
			d.mu.Lock()
			r := d.reads[p]
			d.mu.Unlock()
			<-r.done
			if !r.ok {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
			fmt.Fprintf(&b, "## %s\n\n%s\n\n", rel, r.text)
		}
	}
	docs := strings.TrimRight(b.String(), "\n")
	if len(docs) > DocsBudget {
		cut := DocsBudget
		for cut > 0 && !utf8Start(docs[cut]) {
			cut--
		}
		docs = docs[:cut] + "\n" + DocsTruncatedMarker
	}
	return docs
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// dirsBetween lists root, then each directory down to wd (inclusive). When
// wd is not below root, only wd is listed.
func dirsBetween(root, wd string) []string {
	root, wd = path.Clean(root), path.Clean(wd)
	rel, ok := strings.CutPrefix(wd, root)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return []string{wd}
	}
	dirs := []string{root}
	cur := root
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		dirs = append(dirs, cur)
	}
	return dirs
}

// knowledgeCutoff is the training cutoff of well-known model families.
func knowledgeCutoff(model string) string {
	m := strings.ToLower(model)
	for _, k := range []struct{ prefix, cutoff string }{
		{"gpt-5", "2024-09"}, {"gpt-4.1", "2024-06"}, {"o3", "2024-06"}, {"o4", "2024-06"},
		{"claude-opus-4", "2025-03"}, {"claude-sonnet-4", "2025-03"}, {"claude-haiku-4", "2025-02"},
		{"claude-3", "2024-04"},
		{"gemini-3", "2025-01"}, {"gemini-2.5", "2025-01"}, {"gemini-2", "2024-08"},
	} {
		if strings.HasPrefix(m, k.prefix) {
			return k.cutoff
		}
	}
	return "unknown"
}

// contextWindow is the context window of well-known models, else def.
func contextWindow(model string, def int) int {
	m := strings.ToLower(model)
	switch {
	case strings.HasPrefix(m, "gpt-5"):
		return 400_000
	case strings.HasPrefix(m, "claude"):
		return 200_000
	case strings.HasPrefix(m, "gemini"):
		return 1_048_576
	}
	return def
}
