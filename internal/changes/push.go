package changes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/internal/urlscope"
)

// pushTimeout bounds one push.
const pushTimeout = 5 * time.Minute

// maxExcludes bounds the advertised refs checked for presence in the
// workspace when building the pack (more only makes the pack bigger).
const maxExcludes = 2000

// noThin is the receive-pack capability refusing thin packs.
const noThin = capability.Capability("no-thin")

// credentials of a push, held in memory only, with the Secret's name and
// the URLs its AnnotationAllowedBaseURLs allows (when restricted).
type credentials struct {
	username, password string
	secret, allowed    string
	restricted         bool
}

// checkRedirect refuses a redirect that would carry cred to a URL the
// Secret does not allow (its annotation's list, or an http:// URL without
// the annotation); go-git re-sends the credentials to a redirect's
// target within the remote's origin.
func (cred credentials) checkRedirect(req *http.Request, _ []*http.Request) error {
	if cred.password == "" {
		return nil
	}
	target := req.URL.String()
	switch {
	case cred.restricted && !urlscope.Allows(cred.allowed, target):
		return fmt.Errorf("redirect to %s refused: push credentials Secret %s may not be sent there (annotation %s allows only %q)",
			redactURL(target), cred.secret, AnnotationAllowedBaseURLs, cred.allowed)
	case !cred.restricted && !strings.EqualFold(req.URL.Scheme, "https"):
		return fmt.Errorf("redirect to %s refused: push credentials Secret %s are sent to an http:// URL only when its annotation %s lists it",
			redactURL(target), cred.secret, AnnotationAllowedBaseURLs)
	}
	return nil
}

// push pushes c.Head to the session's branch from the operator and returns
// the ChangesPushed reason and message (redacted of the credentials).
func (rc *Recorder) push(ctx context.Context, r *repo, s *agentsv1.AgentSession, c *agentsv1.Changes) (string, string) {
	if c.Head == c.Base {
		return agentsv1.ReasonNothingToPush, "the session changed nothing; nothing was pushed"
	}
	if c.Branch == "" {
		return agentsv1.ReasonPushFailed, "the workspace is not a git repository (was the clone removed?); nothing was pushed"
	}
	p := s.Spec.Workspace.Git.Push
	remote := p.Remote
	if remote == "" {
		remote = s.Spec.Workspace.Git.Repository
	}
	if err := checkProtected(s, c.Branch); err != nil {
		return agentsv1.ReasonPushFailed, err.Error()
	}
	var cred credentials
	if ref := p.CredentialsSecretRef; ref != nil {
		if rc.Secrets == nil {
			return agentsv1.ReasonPushFailed, "no secret reader configured for push credentials"
		}
		sec, err := rc.Secrets(ctx, s.Namespace, ref.Name)
		if err != nil {
			return agentsv1.ReasonPushFailed, fmt.Sprintf("read push credentials Secret %s: %v", ref.Name, err)
		}
		if err := credentialsAllowed(sec, remote); err != nil {
			return agentsv1.ReasonPushFailed, err.Error()
		}
		cred = credentials{username: string(sec.Data["username"]), password: string(sec.Data["password"])}
		cred.allowed, cred.restricted = sec.Annotations[AnnotationAllowedBaseURLs]
		cred.secret = sec.Name
		if cred.password == "" {
			return agentsv1.ReasonPushFailed, fmt.Sprintf("push credentials Secret %s has no key password", ref.Name)
		}
		if cred.username == "" {
			cred.username = "git"
		}
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	err := pushBranch(ctx, r, remote, cred, c, p.Force, rc.maxPackBytes(), rc.transport)
	if err != nil {
		return agentsv1.ReasonPushFailed, redact(err.Error(), cred)
	}
	return agentsv1.ReasonPushed, fmt.Sprintf("pushed %s to branch %s of %s", short(c.Head), c.Branch, redactURL(remote))
}

// checkProtected refuses to push to the branch the session cloned unless
// spec.workspace.git.push.branch names it.
func checkProtected(s *agentsv1.AgentSession, branch string) error {
	g := s.Spec.Workspace.Git
	if g.Push.Branch != "" || g.Ref == "" {
		return nil // explicit, or the default agent/<name> (never the cloned branch)
	}
	if strings.TrimPrefix(g.Ref, "refs/heads/") == branch {
		return fmt.Errorf("branch %s is the branch the session cloned; set spec.workspace.git.push.branch to it explicitly to push there", branch)
	}
	return nil
}

// pushBranch runs git's push protocol (smart HTTP) from here: the remote's
// refs are read with the credentials, the workspace builds a pack of the
// objects the remote lacks, and the pack, at most maxPack bytes, is sent
// with the ref update. rt is the HTTP transport (nil: the default).
func pushBranch(ctx context.Context, r *repo, remote string, cred credentials, c *agentsv1.Changes, force bool, maxPack int64, rt http.RoundTripper) error {
	u, err := url.Parse(remote)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("push to %s: only http:// and https:// remotes are supported", redactURL(remote))
	}
	ep, err := transport.NewEndpoint(remote)
	if err != nil {
		return fmt.Errorf("push: remote: %w", err)
	}
	var auth transport.AuthMethod
	if cred.password != "" {
		auth = &githttp.BasicAuth{Username: cred.username, Password: cred.password}
	}
	tr := githttp.NewClient(&http.Client{Timeout: pushTimeout, Transport: rt, CheckRedirect: cred.checkRedirect})
	sess, err := tr.NewReceivePackSession(ep, auth)
	if err != nil {
		return fmt.Errorf("push: open session: %w", err)
	}
	defer sess.Close()
	adv, err := sess.AdvertisedReferencesContext(ctx)
	var remoteRefs map[string]plumbing.Hash
	switch {
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
	case err != nil:
		return fmt.Errorf("push: read the remote's branches: %w", err)
	default:
		remoteRefs = adv.References
	}
	refName := plumbing.NewBranchReferenceName(c.Branch)
	old := remoteRefs[refName.String()]
	newHash := plumbing.NewHash(c.Head)
	if old == newHash {
		return nil // already there (a follow-up that changed nothing new)
	}
	if !old.IsZero() && !force {
		if _, err := r.git(ctx, nil, "merge-base", "--is-ancestor", old.String(), c.Head); err != nil {
			return fmt.Errorf("push: the remote branch %s is at %s, which the session's commit %s does not contain; "+
				"set spec.workspace.git.push.force to overwrite it", c.Branch, short(old.String()), short(c.Head))
		}
	}
	var caps *capability.List
	if adv != nil {
		caps = adv.Capabilities
	} else {
		caps = capability.NewList()
	}
	pack, release, err := r.pack(ctx, c.Head, remoteRefs, !caps.Supports(noThin), caps.Supports(capability.OFSDelta), maxPack)
	if err != nil {
		return fmt.Errorf("push: build the pack: %w", err)
	}
	defer release()
	req := packp.NewReferenceUpdateRequestFromCapabilities(caps)
	if caps.Supports(capability.OFSDelta) {
		_ = req.Capabilities.Set(capability.OFSDelta)
	}
	req.Commands = []*packp.Command{{Name: refName, Old: old, New: newHash}}
	req.Packfile = io.NopCloser(bytes.NewReader(pack))
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	if rs != nil {
		if err := rs.Error(); err != nil {
			return fmt.Errorf("push: the remote refused: %w", err)
		}
	}
	return nil
}

// pack builds, in the workspace, the pack of head's objects minus what the
// remote's refs reach (those of them the workspace has), and reads it; a
// pack the workspace reports over limit bytes is refused without reading it.
func (r *repo) pack(ctx context.Context, head string, remoteRefs map[string]plumbing.Hash, thin, ofs bool, limit int64) ([]byte, func(), error) {
	var have []string
	for _, h := range remoteRefs {
		if !h.IsZero() {
			have = append(have, h.String())
		}
	}
	slices.Sort(have)
	have = slices.Compact(have)
	if len(have) > maxExcludes {
		have = have[:maxExcludes]
	}
	if _, err := r.sh(ctx, "mkdir -p "+quote(r.scratch), nil); err != nil {
		return nil, nil, err
	}
	defer func() { _, _ = r.sh(context.WithoutCancel(ctx), "rm -rf "+quote(r.scratch), nil) }()
	revs := head + "\n"
	if len(have) > 0 {
		if err := r.env.WriteFile(ctx, r.scratch+"/have", []byte(strings.Join(have, "\n")+"\n")); err != nil {
			return nil, nil, fmt.Errorf("write the remote's refs: %w", err)
		}
		// Keep the ids that name commits the workspace has.
		out, err := r.sh(ctx, r.command("cat-file", "--batch-check=%(objectname) %(objecttype)")+" < "+quote(r.scratch+"/have"), nil)
		if err != nil {
			return nil, nil, err
		}
		for line := range strings.SplitSeq(out, "\n") {
			if id, typ, ok := strings.Cut(line, " "); ok && typ == "commit" {
				revs += "^" + id + "\n"
			}
		}
	}
	if err := r.env.WriteFile(ctx, r.scratch+"/revs", []byte(revs)); err != nil {
		return nil, nil, fmt.Errorf("write the pack's revisions: %w", err)
	}
	args := []string{"pack-objects", "--stdout", "--revs", "-q"}
	if thin {
		args = append(args, "--thin")
	}
	if ofs {
		args = append(args, "--delta-base-offset")
	}
	file := r.scratch + "/pack"
	if _, err := r.sh(ctx, r.command(args...)+" < "+quote(r.scratch+"/revs")+" > "+quote(file), nil); err != nil {
		return nil, nil, err
	}
	size, err := r.fileSize(ctx, file)
	if err != nil {
		return nil, nil, err
	}
	if size > limit {
		return nil, nil, fmt.Errorf("the pack is %d bytes, over the operator's limit of %d bytes for one push; "+
			"make the change smaller (leave large or generated files out of the work tree or list them in .gitignore), "+
			"or push to a remote that already has the commits the session started from", size, limit)
	}
	return r.readFile(ctx, file, size, limit)
}

// redact removes the credentials from a message.
func redact(msg string, cred credentials) string {
	if cred.password != "" {
		msg = strings.ReplaceAll(msg, cred.password, "[REDACTED]")
		msg = strings.ReplaceAll(msg, url.QueryEscape(cred.password), "[REDACTED]")
		msg = strings.ReplaceAll(msg, url.PathEscape(cred.password), "[REDACTED]")
	}
	if len(msg) > 4096 {
		msg = msg[:4093] + "..."
	}
	return msg
}

// redactURL drops any user information from a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
