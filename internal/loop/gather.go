package loop

import (
	"context"
	"time"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Gathered is what a session's start gathers from its workspace: the
// profile's prompt context (environment, git snapshot, project
// instructions) and the workspace's skills. Gather takes it; a session
// gathers it once, when it starts, unless WithGathered handed it one taken
// ahead.
type Gathered struct {
	done     chan struct{}
	pc       PromptContext
	skills   []Skill
	problems []SkillProblem
	err      error
}

// Gather starts gathering through env what a session with profile p
// gathers when it starts (the skills only with discoverSkills, see
// Config.DisableSkillDiscovery), and returns at once. The prompt context and
// the skills are looked for at the same time: each is round trips to the
// workspace that do not depend on the other. A host that builds a session
// takes it ahead with the same env the session gets, so that it overlaps the
// rest of the session's setup, and hands it over with WithGathered; ctx
// bounds the gathering, and should end when the session does.
func Gather(ctx context.Context, p Profile, env tool.ExecutionEnvironment, now time.Time, discoverSkills bool) *Gathered {
	g := &Gathered{done: make(chan struct{})}
	discovered := make(chan struct{})
	go func() {
		defer close(discovered)
		if discoverSkills {
			g.skills, g.problems = DiscoverSkills(ctx, env)
		}
	}()
	go func() {
		defer close(g.done)
		pc, err := p.Prepare(ctx, env, now)
		<-discovered
		g.pc, g.err = pc, err
	}()
	return g
}

// wait returns what g gathered once it has, or ctx's error.
func (g *Gathered) wait(ctx context.Context) (PromptContext, []Skill, []SkillProblem, error) {
	select {
	case <-g.done:
		return g.pc, g.skills, g.problems, g.err
	case <-ctx.Done():
		return PromptContext{}, nil, nil, context.Cause(ctx)
	}
}

// WithGathered makes the session's start use g, which Gather took with
// the session's profile and environment, instead of gathering itself.
func WithGathered(g *Gathered) Option {
	return func(o *options) error { o.gathered = g; return nil }
}
