package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Conditions and reasons of a session's change (status.changes).
const (
	// ConditionChangesRecorded is True once the change of the last input that ended Succeeded
	// was committed in the workspace and its patch stored; False says why it could not be, or
	// which artifacts were skipped (reason ArtifactsSkipped; the rest is stored).
	ConditionChangesRecorded = "ChangesRecorded"
	// ConditionChangesPushed says what the push of spec.workspace.git.push did: Pushed,
	// NothingToPush (True) or PushFailed (False, with git's message). Absent without push.
	ConditionChangesPushed = "ChangesPushed"

	// ReasonChangesRecorded: the change was committed and its patch and artifacts stored.
	ReasonChangesRecorded = "Recorded"
	// ReasonArtifactsSkipped: the change was stored, but some spec.outputs files were over a
	// size limit; the message names them.
	ReasonArtifactsSkipped = "ArtifactsSkipped"
	// ReasonRecordFailed: the change could not be committed or stored (e.g. no git in the
	// workspace image); the session's phase is not affected.
	ReasonRecordFailed = "RecordFailed"
	// ReasonPushed: the branch was pushed.
	ReasonPushed = "Pushed"
	// ReasonNothingToPush: the session changed nothing; nothing was pushed.
	ReasonNothingToPush = "NothingToPush"
	// ReasonPushFailed: the push failed; the change stays stored and the session's phase is
	// not affected.
	ReasonPushFailed = "PushFailed"
)

// LabelGitCredentials opts a Secret in as git credentials: the operator sends only Secrets
// labelled agent-operator.dev/git-credentials: "true" to a remote named by
// spec.workspace.git.push, and mounts only such a Secret as the clone credentials of
// spec.workspace.git.credentialsSecretRef (otherwise anyone allowed to create a session could
// have the operator send any Secret of the namespace to a server of their choosing).
const LabelGitCredentials = "agent-operator.dev/git-credentials"

// LabelWorkspaceSecret opts a Secret in for spec.workspace.env: a valueFrom.secretKeyRef of
// the workspace container must name a Secret labelled agent-operator.dev/workspace-secret:
// "true". The manager creates the pod, so without it anyone allowed to create a session
// could read any Secret of the namespace from the workspace.
const LabelWorkspaceSecret = "agent-operator.dev/workspace-secret"

// LabelWorkspaceVolume opts an existing PersistentVolumeClaim in for
// spec.workspace.volume.persistentVolumeClaim.claimName: the operator mounts, read-write into
// a pod running the session's image, only a claim labelled agent-operator.dev/workspace-volume:
// "true" (otherwise anyone allowed to create a session could read and change any claim of the
// namespace, another session's workspace among them).
const LabelWorkspaceVolume = "agent-operator.dev/workspace-volume"

// Limits of status.changes and spec.outputs.
const (
	// MaxChangedFiles bounds status.changes.files; status.changes.filesTruncated says when
	// more files changed.
	MaxChangedFiles = 100
	// MaxArtifactBytes is the largest spec.outputs file stored; larger ones are skipped.
	MaxArtifactBytes = 10 << 20
	// MaxArtifactsBytes bounds the spec.outputs files stored per recording; files beyond it
	// are skipped.
	MaxArtifactsBytes = 100 << 20
	// MaxArtifacts bounds the number of spec.outputs files stored per recording.
	MaxArtifacts = 1000
)

// GitPush commits the session's change on a branch and pushes it when the session reaches
// Succeeded (and after every follow-up that ends Succeeded). The push runs in the operator,
// never in the workspace pod: the credentials never enter it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.branch) || (!self.branch.contains('..') && !self.branch.contains('//') && !self.branch.contains('/.') && !self.branch.contains('@{') && !self.branch.contains('.lock/') && !self.branch.startsWith('/') && !self.branch.startsWith('.') && !self.branch.startsWith('-') && !self.branch.endsWith('/') && !self.branch.endsWith('.') && !self.branch.endsWith('.lock') && self.branch != '@')",message="spec.workspace.git.push.branch must be a valid git branch name (no '..', '//', '@{', components starting with '.', ending with '/', '.' or '.lock')"
type GitPush struct {
	// branch the change is committed on and pushed to. Default agent/<session-name>. The
	// change is never pushed to the branch the session cloned unless this names it.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._/-]+$`
	Branch string `json:"branch,omitempty"`
	// remote URL pushed to (http:// or https://). Default spec.workspace.git.repository.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="spec.workspace.git.push.remote must be an http:// or https:// URL"
	Remote string `json:"remote,omitempty"`
	// credentialsSecretRef names a Secret with keys username and password (or a token as
	// password) for the remote, labelled agent-operator.dev/git-credentials: "true". Only the
	// operator reads it: it never enters the workspace pod, events, logs or status. Default:
	// none (anonymous push).
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
	// authorName of the commit. Default agent-operator.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AuthorName string `json:"authorName,omitempty"`
	// authorEmail of the commit. Default agent-operator@localhost.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AuthorEmail string `json:"authorEmail,omitempty"`
	// message of the commit. Default: the first line of the prompt (or of the follow-up
	// message) and the session's name.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Message string `json:"message,omitempty"`
	// force pushes even when the remote branch has commits the session does not have
	// (overwriting them). Default false: such a push fails with PushFailed.
	// +optional
	Force bool `json:"force,omitempty"`
}

// Changes is what the session changed in its workspace, as recorded the last time an input
// ended Succeeded. The full patch (kubectl agent diff) and the spec.outputs artifacts
// (kubectl agent cp) are in the operator's object store, keyed by the session's UID, for the
// journal's retention.
type Changes struct {
	// base is the commit the change is measured from: the cloned commit, or a commit the
	// operator made of the workspace at start when it is not a git repository.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Base string `json:"base,omitempty"`
	// head is the commit holding the change (equal to base when nothing changed).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Head string `json:"head,omitempty"`
	// branch the change is committed on.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Branch string `json:"branch,omitempty"`
	// pushed is set when head is on the remote branch.
	// +optional
	Pushed bool `json:"pushed,omitempty"`
	// filesChanged, insertions and deletions are git diff --numstat base head summed up.
	// +optional
	FilesChanged int64 `json:"filesChanged,omitempty"`
	// +optional
	Insertions int64 `json:"insertions,omitempty"`
	// +optional
	Deletions int64 `json:"deletions,omitempty"`
	// files are the changed files, at most 100 (see filesTruncated).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Files []FileChange `json:"files,omitempty"`
	// filesTruncated is set when more files changed than files lists.
	// +optional
	FilesTruncated bool `json:"filesTruncated,omitempty"`
	// patchBytes is the size of the stored patch.
	// +optional
	PatchBytes int64 `json:"patchBytes,omitempty"`
	// artifacts is the number of spec.outputs files stored.
	// +optional
	Artifacts int32 `json:"artifacts,omitempty"`
	// skippedArtifacts are spec.outputs files not stored, each with why (size limits).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=1024
	SkippedArtifacts []string `json:"skippedArtifacts,omitempty"`
	// recordedTime is when the change was recorded.
	// +optional
	RecordedTime *metav1.Time `json:"recordedTime,omitempty"`
}

// FileChange is one changed file of status.changes.
type FileChange struct {
	// path relative to the workspace.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// status is git's: A (added), M (modified), D (deleted), T (type changed).
	// +optional
	// +kubebuilder:validation:MaxLength=4
	Status string `json:"status,omitempty"`
	// insertions and deletions are lines; both are 0 for a binary file.
	// +optional
	Insertions int64 `json:"insertions,omitempty"`
	// +optional
	Deletions int64 `json:"deletions,omitempty"`
	// binary is set for a binary file.
	// +optional
	Binary bool `json:"binary,omitempty"`
}
