package changes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/loop/tool"
)

// Object names of a recording in the Store.
const (
	// PatchObject is the patch base..head (git diff --binary).
	PatchObject = "changes.patch"
	// SummaryObject is the JSON of status.changes (agentsv1.Changes).
	SummaryObject = "changes.json"
	// ArtifactPrefix prefixes the workspace path of each stored spec.outputs file.
	ArtifactPrefix = "artifacts/"
	// ArtifactsObject lists the stored artifacts' workspace paths (JSON array).
	ArtifactsObject = "artifacts.json"
)

// MaxPatchBytes is the largest patch stored; a larger change is committed
// (and pushed) but its patch is not stored.
const MaxPatchBytes = 256 << 20

// DefaultMaxPackBytes is the default of Recorder.MaxPackBytes, the largest
// pack a push reads from the workspace into the operator, the same bound as
// MaxPatchBytes (the pack of a change is usually smaller than its binary
// patch, but it holds every commit the remote lacks). A push holds its pack
// about twice (go-git copies it into the request body), so one push at the
// limit needs about 512 MiB of the manager's memory.
const DefaultMaxPackBytes = 256 << 20

// Store keeps the objects of a session's recording, keyed by the session's
// namespace and UID (events.ChangesStore implements it).
type Store interface {
	PutObject(ctx context.Context, namespace, name, uid, object string, data []byte) error
}

// SecretReader returns a Secret of namespace. A push uses it only when it
// is labelled agentsv1.LabelGitCredentials=true and its
// AnnotationAllowedBaseURLs, if any, allows the remote.
type SecretReader func(ctx context.Context, namespace, name string) (*corev1.Secret, error)

// Recorder records sessions' changes. The zero value is not usable: Store
// is required.
type Recorder struct {
	// Store keeps patches, summaries and artifacts.
	Store Store
	// Secrets reads push credentials; required to push with
	// credentialsSecretRef.
	Secrets SecretReader
	// MaxPackBytes bounds the pack a push reads from the workspace (0:
	// DefaultMaxPackBytes). A larger pack fails the push (PushFailed)
	// without being read; the change stays recorded.
	MaxPackBytes int64
	// MaxBytesInFlight bounds the bytes of packs and patches held at once
	// by all recordings of this Recorder, i.e. of the manager (0:
	// DefaultMaxBytesInFlight); a recording waits for its share. Set it
	// before the first recording.
	MaxBytesInFlight int64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log is the logger; it never receives a secret.
	Log logr.Logger

	// transport is the HTTP transport of pushes (nil: the default); tests
	// set it to trust their TLS server.
	transport http.RoundTripper

	budgetOnce sync.Once
	budget     *bytesBudget
}

// bytes is the Recorder's budget of bytes in flight.
func (rc *Recorder) bytes() *bytesBudget {
	rc.budgetOnce.Do(func() {
		size := rc.MaxBytesInFlight
		if size <= 0 {
			size = DefaultMaxBytesInFlight
		}
		rc.budget = newBytesBudget(size)
	})
	return rc.budget
}

// Result is the outcome of one recording. It never fails the session.
type Result struct {
	// Changes is status.changes; nil when nothing could be recorded.
	Changes *agentsv1.Changes
	// RecordReason and RecordMessage make condition ChangesRecorded
	// (agentsv1.ReasonChangesRecorded, ReasonArtifactsSkipped or ReasonRecordFailed).
	RecordReason, RecordMessage string
	// PushReason and PushMessage make condition ChangesPushed; empty when
	// the spec asks for no push.
	PushReason, PushMessage string
}

// Summary is a one-line description of r for the CHANGES_RECORDED event.
func (r *Result) Summary() string {
	c := r.Changes
	if c == nil {
		return "changes not recorded: " + r.RecordMessage
	}
	s := fmt.Sprintf("%d files changed, %d insertions(+), %d deletions(-)", c.FilesChanged, c.Insertions, c.Deletions)
	if c.Branch != "" {
		s += " on " + c.Branch
	}
	if r.PushReason != "" {
		s += "; push: " + r.PushReason
	}
	if len(c.SkippedArtifacts) > 0 {
		s += fmt.Sprintf("; %d artifacts skipped", len(c.SkippedArtifacts))
	}
	return s
}

// Enabled reports whether s records its own change: every session except a
// child sharing its parent's workspace (its edits are the parent's change).
func Enabled(s *agentsv1.AgentSession) bool {
	_, shared := s.Annotations[agentsv1.AnnotationSharedWorkspace]
	return !shared
}

// Branch is the branch the change of s is committed on.
func Branch(s *agentsv1.AgentSession) string {
	if g := s.Spec.Workspace.Git; g != nil && g.Push != nil && g.Push.Branch != "" {
		return g.Push.Branch
	}
	return "agent/" + s.Name
}

// Baseline records the state the change is measured from, once per
// workspace (later calls keep it): the checked-out commit of a git
// workspace, or else a commit of the whole workspace in the operator's
// private git directory (privateDir, excluded from itself).
//
// It runs when a session starts, beside its first model call and before
// its first tool call, so it is one shell script and one round trip to the
// workspace (see baselineScript), not one per git command.
func (rc *Recorder) Baseline(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession) error {
	r := &repo{env: env}
	res, err := r.exec(ctx, "the baseline script", baselineScript("agent-operator: workspace of "+s.Name+" at start"), operatorIdentity())
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	stderr := strings.TrimSpace(res.Stderr)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if res.ExitCode == 0 && len(f) > 0 && (f[0] == "kept" || f[0] == "base") {
		return nil
	}
	if len(f) == 3 && f[0] == "fail" {
		if code, err := strconv.Atoi(f[2]); err == nil {
			if f[1] == "rev-parse" { // of HEAD: exit code 1 means no such commit
				var ge error
				if code != 1 {
					ge = &gitError{cmd: "git rev-parse", code: code, stderr: stderr}
				}
				return fmt.Errorf("baseline: the workspace's git repository has no commit checked out (%v)", ge)
			}
			return fmt.Errorf("baseline: %w", &gitError{cmd: "git " + f[1], code: code, stderr: stderr})
		}
	}
	return fmt.Errorf("baseline: the baseline script exited %d with output %q: %s", res.ExitCode, res.Stdout, stderr)
}

// baselineScript is the POSIX shell script of Baseline, run at the
// workspace root with the operator's identity in its environment. Step by
// step it does what separate git commands would: look for .git (else use
// the private git directory, with r.command's flags either way); stop,
// printing "kept", when baseRef already names a commit (not asked of a
// private directory that does not exist yet: one git process fewer on a
// fresh workspace, the common start); for the private
// directory create it (excluding itself), add -A and commit the whole
// workspace; then point baseRef at HEAD and print "base <commit>". A failed
// step prints "fail <step> <exit code>" with the step's stderr on stderr
// (the stderr of steps that succeed is dropped).
func baselineScript(msg string) string {
	git, private := (&repo{}).command(), (&repo{private: true}).command()
	return `if [ -e .git ]; then private=; g() { ` + git + ` "$@"; }
else private=1; g() { ` + private + ` "$@"; }
fi
step() {
	_step=$1; shift
	_err=$("$@" 2>&1 >/dev/null); _code=$?
	if [ "$_code" -ne 0 ]; then
		printf 'fail %s %d\n' "$_step" "$_code"; printf '%s\n' "$_err" >&2; exit "$_code"
	fi
}
initPrivate() {
	mkdir -p ` + quote(privateDir+"/git/info") + ` && g init -q &&
	printf '/%s/\n' ` + quote(privateDir) + ` > ` + quote(privateDir+"/git/info/exclude") + `
}
if { [ -z "$private" ] || [ -d ` + quote(privateDir+"/git") + ` ]; } &&
	g rev-parse -q --verify ` + quote(baseRef+"^{commit}") + ` >/dev/null 2>&1; then echo kept; exit 0; fi
if [ -n "$private" ]; then
	step init initPrivate
	step add g add -A
	step commit g commit -q --no-verify --allow-empty -m ` + quote(msg) + `
fi
head=$(g rev-parse -q --verify 'HEAD^{commit}'); _code=$?
if [ "$_code" -ne 0 ]; then printf 'fail rev-parse %d\n' "$_code"; exit "$_code"; fi
step update-ref g update-ref ` + quote(baseRef) + ` "$head"
printf 'base %s\n' "$head"
`
}

// PodStartCommand is the workspace container's postStart hook (issue 24).
// It records the baseline when the pod starts. The kubelet reports the
// container Running, and so the pod Ready, only after the hook, so nothing
// uses the pod before: a warm-pool pod is recorded long before a session
// claims it. That session's own Baseline then finds the ref ("kept", one git
// process) instead of committing the workspace on the path of its start.
// sidecar is the executor binary's path in the pod (present in every
// workspace image, unlike sh or git), dir the workspace root. The executor's
// best-effort mode bounds the script by the git timeout and exits 0
// whatever happens, because a failing postStart hook kills its container:
// an image without sh or git, or a failed step, leaves the baseline to the
// session, as before. The commit cannot name the session: a pool pod's spec
// must equal a session's.
func PodStartCommand(sidecar, dir string) []string {
	var b strings.Builder
	env := gitEnv(operatorIdentity())
	b.WriteString("export")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString(" " + k + "=" + quote(env[k]))
	}
	b.WriteString("\ncd " + quote(dir) + " || exit 0\n")
	b.WriteString(baselineScript("agent-operator: workspace at its pod's start"))
	return []string{sidecar, "best-effort", "--timeout", gitTimeout.String(), "--", "/bin/sh", "-c", b.String()}
}

// operatorIdentity is the committer of the operator's commits.
func operatorIdentity() map[string]string {
	return identity("agent-operator", "agent-operator@localhost")
}

func identity(name, email string) map[string]string {
	return map[string]string{
		"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
		"GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
	}
}

// Record commits the work tree of s on its branch, stores the patch
// base..head, the summary and the spec.outputs artifacts, and pushes when
// the spec asks. input is the text of the input that ended (the commit
// message's default).
func (rc *Recorder) Record(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession, input string) *Result {
	res := &Result{}
	c, r, err := rc.commit(ctx, env, s, input)
	if err != nil {
		res.RecordReason, res.RecordMessage = agentsv1.ReasonRecordFailed, err.Error()
		return res
	}
	r.budget = rc.bytes()
	now := rc.now()
	c.RecordedTime = &metav1.Time{Time: now}
	res.Changes = c

	patch, release, err := rc.patch(ctx, r, c)
	if err != nil {
		res.RecordReason, res.RecordMessage = agentsv1.ReasonRecordFailed, err.Error()
	}
	if err == nil && patch != nil {
		c.PatchBytes = int64(len(patch))
		if err := rc.Store.PutObject(ctx, s.Namespace, s.Name, string(s.UID), PatchObject, patch); err != nil {
			res.RecordReason, res.RecordMessage = agentsv1.ReasonRecordFailed, fmt.Sprintf("store the patch: %v", err)
		}
	}
	release()
	patch = nil
	if stored := rc.artifacts(ctx, env, s, c); stored != nil {
		list, _ := json.Marshal(stored)
		if err := rc.Store.PutObject(ctx, s.Namespace, s.Name, string(s.UID), ArtifactsObject, list); err != nil && res.RecordReason == "" {
			res.RecordReason, res.RecordMessage = agentsv1.ReasonRecordFailed, fmt.Sprintf("store the artifact list: %v", err)
		}
	}

	// The commit exists: push it even when storing failed (a patch over
	// MaxPatchBytes, a store outage).
	if g := s.Spec.Workspace.Git; g != nil && g.Push != nil {
		res.PushReason, res.PushMessage = rc.push(ctx, r, s, c)
		c.Pushed = res.PushReason == agentsv1.ReasonPushed
	}

	sum, err := json.Marshal(c)
	if err == nil {
		err = rc.Store.PutObject(ctx, s.Namespace, s.Name, string(s.UID), SummaryObject, sum)
	}
	if err != nil && res.RecordReason == "" {
		res.RecordReason, res.RecordMessage = agentsv1.ReasonRecordFailed, fmt.Sprintf("store the summary: %v", err)
	}
	if res.RecordReason == "" {
		res.RecordReason, res.RecordMessage = agentsv1.ReasonChangesRecorded, res.Summary()
		if len(c.SkippedArtifacts) > 0 {
			res.RecordReason = agentsv1.ReasonArtifactsSkipped
			res.RecordMessage = "artifacts skipped: " + strings.Join(c.SkippedArtifacts, "; ")
		}
	}
	return res
}

func (rc *Recorder) maxPackBytes() int64 {
	if rc.MaxPackBytes > 0 {
		return rc.MaxPackBytes
	}
	return DefaultMaxPackBytes
}

func (rc *Recorder) now() time.Time {
	if rc.Now != nil {
		return rc.Now()
	}
	return time.Now()
}

// commit makes the commit on the session's branch and returns the summary
// of base..head.
func (rc *Recorder) commit(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession, input string) (*agentsv1.Changes, *repo, error) {
	r, err := openRepo(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	base, ok, err := r.revParse(ctx, baseRef)
	if err != nil {
		return nil, nil, fmt.Errorf("read the baseline: %w", err)
	}
	if !ok { // no baseline was taken at start (it failed): measure from now on
		if err := rc.Baseline(ctx, env, s); err != nil {
			return nil, nil, err
		}
		if r, err = openRepo(ctx, env); err != nil {
			return nil, nil, err
		}
		if base, _, err = r.revParse(ctx, baseRef); err != nil {
			return nil, nil, fmt.Errorf("read the baseline: %w", err)
		}
	}
	c := &agentsv1.Changes{Base: base}
	if !r.private {
		c.Branch = Branch(s)
		if err := r.checkoutBranch(ctx, c.Branch); err != nil {
			return nil, nil, err
		}
	}
	if _, err := r.git(ctx, nil, "add", "-A"); err != nil {
		return nil, nil, err
	}
	if _, err := r.git(ctx, nil, "diff", "--cached", "--quiet"); err != nil {
		var ge *gitError
		if !errors.As(err, &ge) || ge.code != 1 {
			return nil, nil, err
		}
		// Staged changes: commit them.
		name, email, msg := commitIdentity(s, input)
		line := "printf '%s' \"$AGENT_COMMIT_MESSAGE\" | " + r.command("commit", "-q", "--no-verify", "-F", "-")
		env := identity(name, email)
		env["AGENT_COMMIT_MESSAGE"] = msg
		if _, err := r.sh(ctx, line, env); err != nil {
			return nil, nil, err
		}
	}
	head, ok, err := r.revParse(ctx, "HEAD")
	if err != nil || !ok {
		return nil, nil, fmt.Errorf("read the new commit: %v", err)
	}
	c.Head = head
	if err := r.numstat(ctx, c); err != nil {
		return nil, nil, err
	}
	return c, r, nil
}

// checkoutBranch makes branch the current branch without touching the work
// tree: created at HEAD when missing.
func (r *repo) checkoutBranch(ctx context.Context, branch string) error {
	if err := ValidateBranch(branch); err != nil {
		return err
	}
	ref := "refs/heads/" + branch
	cur, err := r.git(ctx, nil, "symbolic-ref", "-q", "HEAD")
	if err == nil && strings.TrimSpace(cur) == ref {
		return nil
	}
	if _, ok, err := r.revParse(ctx, ref); err != nil {
		return err
	} else if !ok {
		if _, err := r.git(ctx, nil, "update-ref", ref, "HEAD"); err != nil {
			return fmt.Errorf("create branch %s: %w", branch, err)
		}
	}
	if _, err := r.git(ctx, nil, "symbolic-ref", "HEAD", ref); err != nil {
		return fmt.Errorf("switch to branch %s: %w", branch, err)
	}
	return nil
}

// commitIdentity is the author and message of the session's commit.
func commitIdentity(s *agentsv1.AgentSession, input string) (name, email, msg string) {
	name, email = "agent-operator", "agent-operator@localhost"
	var p *agentsv1.GitPush
	if g := s.Spec.Workspace.Git; g != nil {
		p = g.Push
	}
	if p != nil && p.AuthorName != "" {
		name = p.AuthorName
	}
	if p != nil && p.AuthorEmail != "" {
		email = p.AuthorEmail
	}
	if p != nil && p.Message != "" {
		return name, email, p.Message
	}
	first, _, _ := strings.Cut(strings.TrimSpace(input), "\n")
	first = strings.TrimSpace(first)
	if len(first) > 72 {
		first = strings.TrimSpace(first[:72]) + "…"
	}
	if first == "" {
		first = "Changes of agent session " + s.Name
	}
	return name, email, first + "\n\nAgentSession: " + s.Namespace + "/" + s.Name + "\n"
}

// diffArgs are the options of every diff the recorder runs: what
// `git diff --binary --full-index --no-renames base head` prints with git's
// defaults, whatever the workspace's configuration says.
var diffArgs = []string{"--no-renames", "--no-ext-diff", "--no-textconv", "--no-color",
	"--src-prefix=a/", "--dst-prefix=b/", "--diff-algorithm=myers", "--indent-heuristic"}

// numstat fills the counts and files of c from git diff base head.
func (r *repo) numstat(ctx context.Context, c *agentsv1.Changes) error {
	ns, err := r.git(ctx, nil, append(append([]string{"diff", "--numstat", "-z"}, diffArgs...), c.Base, c.Head)...)
	if err != nil {
		return err
	}
	st, err := r.git(ctx, nil, append(append([]string{"diff", "--name-status", "-z"}, diffArgs...), c.Base, c.Head)...)
	if err != nil {
		return err
	}
	files, err := parseNumstat(ns, st)
	if err != nil {
		return err
	}
	c.FilesChanged = int64(len(files))
	for _, f := range files {
		c.Insertions += f.Insertions
		c.Deletions += f.Deletions
	}
	if len(files) > agentsv1.MaxChangedFiles {
		files, c.FilesTruncated = files[:agentsv1.MaxChangedFiles], true
	}
	c.Files = files
	return nil
}

// parseNumstat joins git diff --numstat -z and --name-status -z output
// (without renames: one path per file).
func parseNumstat(numstat, nameStatus string) ([]agentsv1.FileChange, error) {
	status := map[string]string{}
	fields := strings.Split(strings.TrimSuffix(nameStatus, "\x00"), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		status[fields[i+1]] = fields[i]
	}
	var files []agentsv1.FileChange
	for rec := range strings.SplitSeq(strings.TrimSuffix(numstat, "\x00"), "\x00") {
		if rec == "" {
			continue
		}
		parts := strings.SplitN(rec, "\t", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("parse numstat: unexpected record %q", rec)
		}
		f := agentsv1.FileChange{Path: parts[2], Status: status[parts[2]]}
		if parts[0] == "-" && parts[1] == "-" {
			f.Binary = true
		} else {
			var err error
			if f.Insertions, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
				return nil, fmt.Errorf("parse numstat %q: %w", rec, err)
			}
			if f.Deletions, err = strconv.ParseInt(parts[1], 10, 64); err != nil {
				return nil, fmt.Errorf("parse numstat %q: %w", rec, err)
			}
		}
		files = append(files, f)
	}
	return files, nil
}

// patch returns git diff --binary base head; nil (and a skipped note) when
// it is over MaxPatchBytes.
func (rc *Recorder) patch(ctx context.Context, r *repo, c *agentsv1.Changes) ([]byte, func(), error) {
	none := func() {}
	file := r.scratch + "/changes.patch"
	line := "mkdir -p " + quote(r.scratch) + " && " +
		r.command(append(append([]string{"diff", "--binary", "--full-index"}, diffArgs...), c.Base, c.Head)...) +
		" > " + quote(file)
	if _, err := r.sh(ctx, line, nil); err != nil {
		return nil, none, fmt.Errorf("make the patch: %w", err)
	}
	defer func() { _, _ = r.sh(context.WithoutCancel(ctx), "rm -rf "+quote(r.scratch), nil) }()
	size, err := r.fileSize(ctx, file)
	if err != nil {
		return nil, none, fmt.Errorf("make the patch: %w", err)
	}
	if size > MaxPatchBytes {
		return nil, none, fmt.Errorf("the patch is %d bytes, over the %d bytes stored; the commit %s holds the change", size, MaxPatchBytes, c.Head)
	}
	if size == 0 {
		return []byte{}, none, nil
	}
	data, release, err := r.readFile(ctx, file, size, MaxPatchBytes)
	if err != nil {
		return nil, none, fmt.Errorf("read the patch: %w", err)
	}
	return data, release, nil
}

// artifacts stores the files matching spec.outputs within the limits,
// notes the skipped ones in c and returns the stored paths (nil without
// spec.outputs).
func (rc *Recorder) artifacts(ctx context.Context, env tool.ExecutionEnvironment, s *agentsv1.AgentSession, c *agentsv1.Changes) []string {
	if len(s.Spec.Outputs) == 0 {
		return nil
	}
	stored := []string{}
	var paths []string
	for _, g := range s.Spec.Outputs {
		if err := ValidateGlob(g); err != nil {
			c.SkippedArtifacts = append(c.SkippedArtifacts, fmt.Sprintf("%s: %v", g, err))
			continue
		}
		hits, err := env.Glob(ctx, g, env.WorkingDirectory())
		if err != nil {
			c.SkippedArtifacts = append(c.SkippedArtifacts, fmt.Sprintf("%s: %v", g, err))
			continue
		}
		for _, h := range hits {
			p, ok := workspaceRel(env.WorkingDirectory(), h)
			if !ok || p == privateDir || strings.HasPrefix(p, privateDir+"/") {
				continue
			}
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	var total int64
	for _, p := range paths {
		if c.Artifacts >= agentsv1.MaxArtifacts {
			c.SkippedArtifacts = append(c.SkippedArtifacts, fmt.Sprintf("%s: over the limit of %d files", p, agentsv1.MaxArtifacts))
			continue
		}
		fc, err := env.ReadFile(ctx, p, tool.ReadOptions{MaxBytes: agentsv1.MaxArtifactBytes})
		if err != nil {
			c.SkippedArtifacts = append(c.SkippedArtifacts, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if total+int64(len(fc.Content)) > agentsv1.MaxArtifactsBytes {
			c.SkippedArtifacts = append(c.SkippedArtifacts, fmt.Sprintf("%s: %d bytes would pass the limit of %d bytes of artifacts in all", p, len(fc.Content), agentsv1.MaxArtifactsBytes))
			continue
		}
		if err := rc.Store.PutObject(ctx, s.Namespace, s.Name, string(s.UID), ArtifactPrefix+p, fc.Content); err != nil {
			c.SkippedArtifacts = append(c.SkippedArtifacts, fmt.Sprintf("%s: store: %v", p, err))
			continue
		}
		total += int64(len(fc.Content))
		c.Artifacts++
		stored = append(stored, p)
	}
	if len(c.SkippedArtifacts) > 100 {
		c.SkippedArtifacts = append(c.SkippedArtifacts[:99], fmt.Sprintf("and %d more", len(c.SkippedArtifacts)-99))
	}
	for i, m := range c.SkippedArtifacts {
		if len(m) > 1024 {
			c.SkippedArtifacts[i] = m[:1021] + "..."
		}
	}
	return stored
}

// workspaceRel makes a path Glob returned relative to the root; ok is false
// for one outside it.
func workspaceRel(root, p string) (string, bool) {
	if path.IsAbs(p) {
		rel, ok := strings.CutPrefix(p, strings.TrimSuffix(root, "/")+"/")
		if !ok {
			return "", false
		}
		p = rel
	}
	p = path.Clean(p)
	if p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

// ValidateGlob checks an outputs glob: relative, without '..'.
func ValidateGlob(g string) error {
	if g == "" {
		return errors.New("empty glob")
	}
	if strings.HasPrefix(g, "/") {
		return errors.New("glob must be relative to the workspace")
	}
	if slices.Contains(strings.Split(g, "/"), "..") {
		return errors.New("glob must not contain '..'")
	}
	return nil
}

// ValidateBranch checks a branch name against git's ref rules
// (git check-ref-format).
func ValidateBranch(b string) error {
	bad := func(why string) error { return fmt.Errorf("invalid branch name %q: %s", b, why) }
	switch {
	case b == "", b == "@":
		return bad("empty or '@'")
	case strings.HasPrefix(b, "-"):
		return bad("starts with '-'")
	case strings.HasPrefix(b, "/"), strings.HasSuffix(b, "/"), strings.Contains(b, "//"):
		return bad("empty path component")
	case strings.HasSuffix(b, "."):
		return bad("ends with '.'")
	case strings.Contains(b, ".."):
		return bad("contains '..'")
	case strings.Contains(b, "@{"):
		return bad("contains '@{'")
	}
	for _, r := range b {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return bad(fmt.Sprintf("contains %q", r))
		}
	}
	for comp := range strings.SplitSeq(b, "/") {
		if strings.HasPrefix(comp, ".") || strings.HasSuffix(comp, ".lock") {
			return bad("a component starts with '.' or ends with '.lock'")
		}
	}
	return nil
}
