package agentsession

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
)

// deleteClaim deletes the claim the operator created for s and, unless
// keepDeleting, lets it go as the kube-controller-manager would once no pod
// uses it (envtest runs no controller that removes pvc-protection). It
// returns the claim's UID.
func deleteClaim(t *testing.T, s *agentsv1.AgentSession, keepDeleting bool) types.UID {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{}
	key := types.NamespacedName{Namespace: s.Namespace, Name: pvcName(s)}
	if err := testClient.Get(t.Context(), key, pvc); err != nil {
		t.Fatalf("the operator's claim: %v", err)
	}
	if err := testClient.Delete(t.Context(), pvc); err != nil {
		t.Fatalf("delete claim: %v", err)
	}
	if keepDeleting {
		return pvc.UID
	}
	eventually(t, "the claim gone", func() error {
		got := &corev1.PersistentVolumeClaim{}
		switch err := testClient.Get(t.Context(), key, got); {
		case apierrors.IsNotFound(err) || err == nil && got.UID != pvc.UID:
			return nil
		case err != nil:
			return err
		}
		got.Finalizers = nil
		if err := testClient.Update(t.Context(), got); err != nil {
			return err
		}
		return fmt.Errorf("claim still there")
	})
	return pvc.UID
}

// A claim the operator created holds the session's work: when it went with
// the pod while an input runs, the session fails saying so (WorkspaceLost)
// instead of resuming the input on a new, empty claim, which the old code
// did while status said "a new one uses the same claim".
//
// The claim may also go after the new pod was made for it: that pod is
// never scheduled and would wait forever (the old code's session stayed
// Provisioning), so the session fails the same way.
func TestLostPodAndClaimFailTheSession(t *testing.T) {
	for _, tc := range []struct {
		keepDeleting bool // the claim stays Terminating (protected)
		afterNewPod  bool // deleted once the pod replacing the lost one exists
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("claim still being deleted %v, after the new pod %v", tc.keepDeleting, tc.afterNewPod), func(t *testing.T) {
			s, pod := blockedSession(t, func(s *agentsv1.AgentSession) {
				s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{Size: ptrQuantity("1Gi")}
			})
			if err := testClient.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
				t.Fatalf("delete pod: %v", err)
			}
			if tc.afterNewPod {
				waitReplacedPod(t, pod)
			}
			deleteClaim(t, s, tc.keepDeleting)
			got := waitPhase(t, s, agentsv1.PhaseFailed, nil)
			c := meta.FindStatusCondition(got.Status.Conditions, agentsv1.ConditionWorkspaceReady)
			if c == nil || c.Reason != agentsv1.ReasonWorkspaceLost || !strings.Contains(c.Message, pvcName(s)) {
				t.Errorf("WorkspaceReady = %+v, want WorkspaceLost naming the claim", c)
			}
			if !strings.Contains(got.Status.Error, "claim "+pvcName(s)) {
				t.Errorf("status.error = %q, want it to name the claim", got.Status.Error)
			}
		})
	}
}

// An idle session whose released pod's claim was deleted gets a new, empty
// claim for the pod a message starts, as an emptyDir session gets a new
// emptyDir, and a Warning Event says so. The same when the claim is deleted
// under the pod made for the message: that pod would never be scheduled,
// so it is replaced, on a new claim (the old code left the message waiting
// forever).
func TestIdleSessionsDeletedClaimIsMadeAnewAndSaidSo(t *testing.T) {
	for _, underMessagesPod := range []bool{false, true} {
		t.Run(fmt.Sprintf("under the message's pod %v", underMessagesPod), func(t *testing.T) {
			s, pod := releasedIdleSession(t, func(s *agentsv1.AgentSession) {
				s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{Size: ptrQuantity("1Gi")}
			})
			var old types.UID
			if underMessagesPod {
				appendFollowUp(t, s)
				pod = waitReplacedPod(t, pod)
				old = deleteClaim(t, s, false)
			} else {
				old = deleteClaim(t, s, false)
				appendFollowUp(t, s)
			}
			markPodReady(t, waitReplacedPod(t, pod))
			waitWarning(t, s.Namespace, s.UID, ReasonWorkspaceClaimRecreated)
			pvc := &corev1.PersistentVolumeClaim{}
			if err := testClient.Get(t.Context(), types.NamespacedName{Namespace: s.Namespace, Name: pvcName(s)}, pvc); err != nil || pvc.UID == old {
				t.Errorf("claim after the message: %v (same as the deleted one: %v)", err, pvc.UID == old)
			}
			waitPhase(t, s, agentsv1.PhaseSucceeded, func(g *agentsv1.AgentSession) error {
				if g.Status.Result != "Follow-up done." {
					return fmt.Errorf("result %q", g.Status.Result)
				}
				return nil
			})
		})
	}
}

// An API server that does not answer while a lost pod's claim is looked at
// is an outage, not a lost claim: claimGone reports the error and says
// nothing is gone, so the reconcile is tried again and the session is not
// failed (workspaceLost fails it only on a message).
func TestClaimReadDuringAnOutageLosesNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	away := rest.CopyConfig(testCfg)
	away.Host = "https://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	away.Timeout = 2 * time.Second
	reader, err := client.New(away, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: testClient, APIReader: reader}
	s := &agentsv1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: newNamespace(t), Name: "outage", UID: "5e1f"}}
	s.Spec.Workspace.Volume.PersistentVolumeClaim = &agentsv1.PVCVolume{Size: ptrQuantity("1Gi")}
	msg, deleting, err := r.claimGone(t.Context(), s)
	if err == nil || msg != "" || deleting {
		t.Errorf("claimGone during an outage = %q, %v, %v; want no verdict and the error", msg, deleting, err)
	}
}
