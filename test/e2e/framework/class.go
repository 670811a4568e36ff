package framework

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// SessionClass is the agent-operator.dev/class of every AgentSession the suite creates, and
// the sessionClass of every operator release it installs: the suite's releases handle only
// the suite's sessions, and an install that was there before (`make demo`) handles none of
// them, whatever its scope. E2E_SESSION_CLASS overrides it, so that two runs of the suite on
// one cluster (a developer's specs beside another's) never serve each other's sessions.
var SessionClass = envOr("E2E_SESSION_CLASS", "e2e")

// LabelClass is agentsv1.LabelClass (the framework does not import the API package).
const LabelClass = "agent-operator.dev/class"

// WithSessionClass returns c labelling every AgentSession it creates with SessionClass.
func WithSessionClass(c client.WithWatch, scheme *runtime.Scheme) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil && gvk.Kind == "AgentSession" {
				l := obj.GetLabels()
				if l == nil {
					l = map[string]string{}
				}
				if _, set := l[LabelClass]; !set {
					l[LabelClass] = SessionClass
				}
				obj.SetLabels(l)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
}
