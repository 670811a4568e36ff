package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.yaml.in/yaml/v3"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// SkillToolName is the tool that returns a skill's body (seed 004 "skill",
// seed 001 load_skills).
const SkillToolName = "skill"

// SkillDirs are the folders searched for <name>/SKILL.md, in every
// directory from the working directory up to the workspace root: the
// .agents/skills convention of seed 004, the skills/ folder of seed 001, and
// .claude/skills used by Claude Code.
var SkillDirs = []string{".agents/skills", ".claude/skills", "skills"}

// maxSkillBytes bounds a SKILL.md file.
const maxSkillBytes = 256 << 10

var skillName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Skill is a named body of instructions the model loads on demand. Source
// says where it came from (a path, or e.g. "configmap/team-skills").
type Skill struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Body        string `json:"body"`
	Source      string `json:"source,omitempty"`
}

func (sk Skill) validate() error {
	switch {
	case !skillName.MatchString(sk.Name):
		return fmt.Errorf("skill name %q must be 1-64 letters, digits, '.', '_' or '-'", sk.Name)
	case strings.TrimSpace(sk.Description) == "":
		return fmt.Errorf("skill %q has no description", sk.Name)
	}
	return nil
}

// ParseSkill parses a SKILL.md file: YAML front matter between "---" lines
// with name and description, then the body.
func ParseSkill(data []byte, source string) (Skill, error) {
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	if !strings.HasPrefix(text, "---\n") {
		return Skill{}, errors.New("no front matter: the file must start with a line \"---\"")
	}
	fm, body, ok := strings.Cut(text[4:], "\n---")
	if !ok {
		return Skill{}, errors.New("front matter is not closed by a line \"---\"")
	}
	body = strings.TrimPrefix(body, "\n")
	var meta struct {
		Name        string `yaml:"name"`
		Description string `yaml:"description"`
	}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(fm)))
	if err := dec.Decode(&meta); err != nil {
		return Skill{}, fmt.Errorf("front matter: %w", err)
	}
	sk := Skill{Name: strings.TrimSpace(meta.Name), Description: strings.TrimSpace(meta.Description),
		Body: strings.TrimSpace(body), Source: source}
	if err := sk.validate(); err != nil {
		return Skill{}, fmt.Errorf("front matter: %w", err)
	}
	return sk, nil
}

// SkillProblem is a SKILL.md that could not be used.
type SkillProblem struct {
	Path string
	Err  error
}

func (p SkillProblem) Error() string { return fmt.Sprintf("skill %s: %v", p.Path, p.Err) }

// DiscoverSkills finds SKILL.md files in SkillDirs from env's working
// directory up to the workspace root, through env (so it works in the
// workspace pod). Nearer directories come first; of two skills with the
// same name the nearer wins. Files that cannot be read or parsed, and
// files behind symlinks that leave the workspace, are returned as
// problems, never as an error.
func DiscoverSkills(ctx context.Context, env tool.ExecutionEnvironment) ([]Skill, []SkillProblem) {
	var (
		skills   []Skill
		problems []SkillProblem
		seen     = map[string]bool{}
	)
	dir := path.Clean(env.WorkingDirectory())
	for {
		parent := path.Dir(dir)
		lists, parentErr := listSkillDirs(ctx, env, dir, parent)
		for _, l := range lists {
			if l.err != nil {
				if errors.Is(l.err, tool.ErrPathEscapes) {
					problems = append(problems, SkillProblem{Path: l.root, Err: l.err})
				}
				continue // usually: no such folder
			}
			for _, c := range l.found {
				var perr parseError
				switch {
				case c.err == nil:
				case errors.Is(c.err, tool.ErrPathEscapes) || errors.As(c.err, &perr) ||
					(c.isDir && !errors.Is(c.err, tool.ErrNotFound)):
					problems = append(problems, SkillProblem{Path: c.path, Err: c.err})
					continue
				default:
					continue // no SKILL.md there
				}
				if seen[c.skill.Name] {
					continue
				}
				seen[c.skill.Name] = true
				skills = append(skills, c.skill)
			}
		}
		if parent == dir || ctx.Err() != nil || errors.Is(parentErr, tool.ErrPathEscapes) {
			break // the filesystem's or the workspace's root
		}
		dir = parent
	}
	return skills, problems
}

// skillDir is one of SkillDirs in one directory: its listing's error, or
// the SKILL.md of each entry.
type skillDir struct {
	root  string
	err   error
	found []*skillFile
}

// skillFile is the SKILL.md of one entry of a skill folder, read.
type skillFile struct {
	path  string
	isDir bool
	skill Skill
	err   error
}

// maxSkillReads bounds the workspace calls of skills discovery in flight.
const maxSkillReads = 8

// listSkillDirs lists SkillDirs in dir and reads the SKILL.md of each entry,
// and lists parent (to learn whether it is still inside the workspace), all
// at once: each is a round trip to the workspace that depends on no other.
// The listings come back in the order of SkillDirs, their files in the
// order listed.
func listSkillDirs(ctx context.Context, env tool.ExecutionEnvironment, dir, parent string) ([]*skillDir, error) {
	var (
		wg        sync.WaitGroup
		slots     = make(chan struct{}, maxSkillReads)
		parentErr error
	)
	do := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done(): // f fails at once
			}
			f()
		}()
	}
	if parent != dir {
		do(func() { _, parentErr = env.ListDirectory(ctx, parent, 1) })
	}
	lists := make([]*skillDir, len(SkillDirs))
	var listed sync.WaitGroup
	for i, sd := range SkillDirs {
		l := &skillDir{root: path.Join(dir, sd)}
		lists[i] = l
		listed.Add(1)
		do(func() {
			defer listed.Done()
			var entries []tool.DirEntry
			entries, l.err = env.ListDirectory(ctx, l.root, 1)
			for _, e := range entries {
				// Symlinked skill folders are listed as non-directories:
				// try every entry; env refuses links leaving the workspace.
				f := &skillFile{path: path.Join(l.root, e.Name, "SKILL.md"), isDir: e.IsDir, err: context.Canceled} // until read
				l.found = append(l.found, f)
			}
		})
	}
	listed.Wait()
	// The SKILL.md files by a few workers, not a goroutine each: a
	// workspace may put any number of entries in a skill folder.
	var files []*skillFile
	for _, l := range lists {
		files = append(files, l.found...)
	}
	var next atomic.Int64
	for range min(maxSkillReads, len(files)) {
		do(func() {
			for i := next.Add(1) - 1; i < int64(len(files)) && ctx.Err() == nil; i = next.Add(1) - 1 {
				f := files[i]
				f.skill, f.err = readSkill(ctx, env, f.path)
			}
		})
	}
	wg.Wait()
	return lists, parentErr
}

// parseError is a SKILL.md that was read but is not valid.
type parseError struct{ err error }

func (e parseError) Error() string { return e.err.Error() }
func (e parseError) Unwrap() error { return e.err }

func readSkill(ctx context.Context, env tool.ExecutionEnvironment, p string) (Skill, error) {
	fc, err := env.ReadFile(ctx, p, tool.ReadOptions{})
	if err != nil {
		return Skill{}, err
	}
	if len(fc.Content) > maxSkillBytes {
		return Skill{}, parseError{fmt.Errorf("%d bytes is more than the %d a skill may have", len(fc.Content), maxSkillBytes)}
	}
	sk, err := ParseSkill([]byte(fc.Content), p)
	if err != nil {
		return Skill{}, parseError{err}
	}
	return sk, nil
}

// SkillsIndex is the system prompt section naming the skills (seed 001
// discovery summary).
func SkillsIndex(skills []Skill) string {
	if len(skills) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Skills\n\nYou have access to guidance for these domains:\n")
	for _, sk := range skills {
		fmt.Fprintf(&b, "- **%s**: %s\n", sk.Name, oneLine(sk.Description))
	}
	fmt.Fprintf(&b, "\nTo get the detailed instructions of one, call the %s tool with its name.\n", SkillToolName)
	return b.String()
}

func oneLine(s string) string { return clip(strings.Join(strings.Fields(s), " "), 300) }

// prepareSkills takes the workspace skills Gather found, reports
// unusable ones as WARNING events, registers the skill tool and adds the
// index to the prompt context. It runs once, when the prompt context is
// gathered.
func (s *Session) prepareSkills(ctx context.Context, pc *PromptContext, found []Skill, problems []SkillProblem) error {
	s.mu.Lock()
	have := map[string]bool{}
	for _, sk := range s.skills {
		have[sk.Name] = true
	}
	for _, sk := range found {
		if have[sk.Name] {
			problems = append(problems, SkillProblem{Path: sk.Source,
				Err: fmt.Errorf("a skill named %q is already provided by the platform; this one is ignored", sk.Name)})
			continue
		}
		have[sk.Name] = true
		s.skills = append(s.skills, sk)
	}
	skills := slices.Clone(s.skills)
	s.mu.Unlock()
	warnings := slices.Clone(s.cfg.SkillWarnings)
	for _, p := range problems {
		warnings = append(warnings, p.Error())
	}
	for _, w := range warnings {
		if err := s.emit(ctx, EventWarning, EventData{Message: w}); err != nil {
			return err
		}
	}
	if err := s.registerSkillTool(); err != nil {
		return err
	}
	if idx := SkillsIndex(skills); idx != "" {
		if pc.ProjectDocs != "" {
			pc.ProjectDocs += "\n\n"
		}
		pc.ProjectDocs += idx
	}
	return nil
}

// Skills returns the skills the session offers.
func (s *Session) Skills() []Skill {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.skills)
}

// registerSkillTool registers the skill tool once there are skills.
func (s *Session) registerSkillTool() error {
	s.mu.Lock()
	n := len(s.skills)
	s.mu.Unlock()
	if n == 0 {
		return nil
	}
	return s.extra.Register(tool.Registered{
		Definition: tool.Definition{
			Name:        SkillToolName,
			Description: "Load the full instructions of a skill named in the system prompt's Skills section.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string",` +
				`"description":"The skill's name."}},"required":["name"]}`),
		},
		Executor:   s.runSkill,
		Idempotent: true,
	})
}

func (s *Session) runSkill(_ context.Context, inv *tool.Invocation) (tool.Result, error) {
	var args struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(inv.Arguments, &args); err != nil {
		return tool.Result{Output: "invalid arguments: " + err.Error(), IsError: true}, nil
	}
	skills := s.Skills()
	names := make([]string, 0, len(skills))
	for _, sk := range skills {
		if sk.Name == args.Name {
			return tool.Result{Output: fmt.Sprintf("# Skill: %s\n\n%s", sk.Name, sk.Body)}, nil
		}
		names = append(names, sk.Name)
	}
	return tool.Result{Output: fmt.Sprintf("no skill named %q; available: %s", args.Name, strings.Join(names, ", ")),
		IsError: true}, nil
}
