package loop

import (
	"maps"
	"sync"

	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// FileView is what the model last saw of a file (tool.FileView).
type FileView = tool.FileView

// FileViews is the read tracking of seed 002 FR-TOOL-PATCH-02 (see
// tool.Views): a session and the subagents sharing its workspace share one
// (in-process subagents inherit it; pass one to WithFileViews to share it
// between sessions).
type FileViews = tool.Views

// NewFileViews returns an empty FileViews.
func NewFileViews() *FileViews { return tool.NewViews() }

// WithFileViews makes the session use (and share) v instead of its own.
func WithFileViews(v *FileViews) Option {
	return func(o *options) error { o.files = v; return nil }
}

func orNewFileViews(v *FileViews) *FileViews {
	if v != nil {
		return v
	}
	return NewFileViews()
}

// callViews is the FileViews one tool call sees: it forwards to the
// session's views and remembers what the call recorded, for the call's
// TOOL_CALL_END event (the journal from which restore rebuilds the views).
type callViews struct {
	*FileViews
	mu  sync.Mutex
	rec map[string]tool.FileView // a Size of -1 marks a forgotten path
}

func (c *callViews) Record(path string, v tool.FileView) {
	c.FileViews.Record(path, v)
	c.note(path, v)
}

func (c *callViews) Forget(path string) {
	c.FileViews.Forget(path)
	c.note(path, tool.FileView{Size: -1})
}

func (c *callViews) note(path string, v tool.FileView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec == nil {
		c.rec = map[string]tool.FileView{}
	}
	c.rec[path] = v
}

// recorded returns what the call recorded, or nil.
func (c *callViews) recorded() map[string]tool.FileView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.rec)
}

// restoreFileViews replays the file views a journaled TOOL_CALL_END
// recorded, so a restored session refuses and allows exactly the edits the
// crashed one would have.
func (s *Session) restoreFileViews(d EventData) {
	for path, v := range d.Files {
		if v.Size < 0 {
			s.files.Forget(path)
		} else {
			s.files.Record(path, v)
		}
	}
}
