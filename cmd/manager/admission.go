package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// sessionAdmission is a readiness check that passes once the API server
// admits the create of an AgentSession of this install (a server-side dry
// run: nothing is stored). The chart's MutatingAdmissionPolicy makes every
// such create wait for the API server's schema of the CRD, which it loads a
// few seconds after the CRD is created and again after every API server
// start; until then the create fails with 503 ("Resource kind ... not
// found"), whatever the policy's failurePolicy. So `helm install --wait`,
// which waits for the manager to be ready, would return while a user's
// first `kubectl apply` still fails. Once passed, the check stays passed
// without asking the API server again: a later API server restart opens
// the same window, and the manager being unready then would help nobody.
type sessionAdmission struct {
	// Client creates with dry run; it needs no cache.
	Client client.Client
	// Namespace is where the dry run is made: one whose sessions this
	// install serves, so the policy's namespace selector matches.
	Namespace string
	// Class is the install's session class label ("" for none), so the
	// policy's object selector matches.
	Class string
	Log   logr.Logger

	mu     sync.Mutex
	passed bool
}

// Check is the healthz.Checker.
func (a *sessionAdmission) Check(req *http.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.passed {
		return nil
	}
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	err := a.admit(ctx)
	switch {
	case err == nil:
		a.Log.Info("The API server admits AgentSessions", "namespace", a.Namespace)
	case retriable(err):
		return fmt.Errorf("the API server does not admit AgentSessions yet: %w", err)
	default:
		// Not something time mends (RBAC, a quota, a policy of the cluster's
		// own): readiness must not wait for it forever. Sessions report such
		// errors themselves.
		a.Log.Info("Could not check that the API server admits AgentSessions; readiness does not wait for it",
			"namespace", a.Namespace, "error", err.Error())
	}
	a.passed = true
	return nil
}

// admit makes a dry-run create of a session that matches the install's
// admission policies.
func (a *sessionAdmission) admit(ctx context.Context) error {
	s := &agentsv1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-check-", Namespace: a.Namespace},
		Spec: agentsv1.AgentSessionSpec{
			Model: agentsv1.ModelSpec{Provider: agentsv1.ProviderScripted, Name: "admission-check",
				ScriptConfigMapRef: &agentsv1.ConfigMapKeyRef{Name: "admission-check"}},
			Prompt: "Checks that the API server admits AgentSessions; never stored.",
		},
	}
	if a.Class != "" {
		s.Labels = map[string]string{agentsv1.LabelClass: a.Class}
	}
	return a.Client.Create(ctx, s, client.DryRunAll)
}

// retriable reports whether err is one the API server can outgrow: it is
// unavailable, overloaded or not reachable at all.
func retriable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer: a connection error or a timeout
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err)
}
