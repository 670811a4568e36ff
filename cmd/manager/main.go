// Command manager runs the agent-operator controller manager: the AgentSession
// reconciler, the session runners and (unless --nats-url is given) an embedded
// NATS server with JetStream that holds the session journals. It only parses
// flags and wires packages together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"

	agentsv1 "github.com/agent-operator/agent-operator/api/v1alpha1"
	"github.com/agent-operator/agent-operator/controllers/agentsession"
	"github.com/agent-operator/agent-operator/internal/changes"
	"github.com/agent-operator/agent-operator/internal/claim"
	"github.com/agent-operator/agent-operator/internal/events"
	"github.com/agent-operator/agent-operator/internal/k8senv"
	"github.com/agent-operator/agent-operator/internal/metrics"
	"github.com/agent-operator/agent-operator/internal/pricing"
	"github.com/agent-operator/agent-operator/internal/runner"
	"github.com/agent-operator/agent-operator/internal/shard"
	"github.com/agent-operator/agent-operator/internal/tracing"
)

type options struct {
	metricsAddr, probeAddr, pprofAddr string
	leaderElect                       bool
	leaderElectionID                  string

	natsURL   string
	natsConn  events.ConnectOptions
	storeDir  string
	natsPort  int
	natsHost  string
	stream    events.StreamConfig
	shutdown  time.Duration
	images    agentsession.Images
	pullPol   string
	verbosity int
	warmPools []agentsession.WarmPool
	// maxSessions bounds the concurrent top-level sessions per namespace (0: unlimited).
	maxSessions int
	// reconcilers is how many sessions the controller reconciles at once.
	reconcilers int
	// priorityQueue turns on controller-runtime's priority work queue.
	priorityQueue bool
	// natsAuth makes the embedded NATS server require credentials; credsAddr
	// serves reader credentials (issue 16, see credentials.go), readerTTL
	// bounds them.
	natsAuth  bool
	credsAddr string
	readerTTL time.Duration
	// Scoping installs (issue 15): the sessions' class this install handles,
	// the namespaces it watches (none: all), and who it is in session claims.
	sessionClass    string
	watchNamespaces []string
	install         string
	claimDuration   time.Duration
	// reportUnserved is how long a session of a class no install serves
	// waits before this install says so on it (0: never).
	reportUnserved time.Duration
	// admissionWorkers is how many new sessions get their first status at once.
	admissionWorkers int
	// statusInterval is how often, at most, a session's progress-only
	// status changes are written (0: every change at once).
	statusInterval time.Duration
	// prices is the price table: the built-in one, overridden by --prices-file.
	prices *pricing.Table
	// Replicas (issue 21): shardSessions spreads the sessions over every
	// replica, each announcing itself with a Lease of replicaLease in
	// replicaNamespace.
	shardSessions    bool
	replicaLease     time.Duration
	replicaNamespace string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address of Go's pprof endpoints for profiling the manager (0 disables them; bind to loopback and reach it with kubectl port-forward).")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica runs sessions.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "agent-operator.agent-operator.dev", "Name of the leader election Lease.")
	fs.StringVar(&o.natsURL, "nats-url", "", "URL of an external NATS server with JetStream; empty embeds one.")
	fs.StringVar(&o.natsConn.CredsFile, "nats-creds-file", "", "NATS .creds file for --nats-url.")
	fs.StringVar(&o.natsConn.NKeySeedFile, "nats-nkey-file", "", "NATS NKey seed file for --nats-url.")
	fs.StringVar(&o.natsConn.CAFile, "nats-ca-file", "", "CA bundle that verifies the NATS server.")
	fs.StringVar(&o.natsConn.CertFile, "nats-cert-file", "", "Client certificate for NATS.")
	fs.StringVar(&o.natsConn.KeyFile, "nats-key-file", "", "Client key for NATS.")
	fs.StringVar(&o.storeDir, "nats-store-dir", "/var/lib/agent-operator/nats", "JetStream store of the embedded server.")
	fs.IntVar(&o.natsPort, "nats-port", 4222, "Client port of the embedded server (0: in-process only).")
	fs.StringVar(&o.natsHost, "nats-host", "127.0.0.1", "Listen address of the embedded server; loopback keeps it reachable only through kubectl port-forward.")
	fs.BoolVar(&o.natsAuth, "nats-auth", true, "Embedded server: refuse connections without credentials; readers get per-namespace credentials from --reader-credentials-bind-address.")
	fs.StringVar(&o.credsAddr, "reader-credentials-bind-address", ":8443", "Address of the HTTPS endpoint minting read-only NATS credentials for callers Kubernetes RBAC allows (0 disables; needs --nats-auth).")
	fs.DurationVar(&o.readerTTL, "reader-credential-ttl", events.DefaultReaderTTL, "How long a minted reader credential opens new connections.")
	fs.StringVar(&o.stream.Name, "stream-name", events.DefaultStreamName, "JetStream stream of the events.")
	fs.StringVar(&o.stream.Prefix, "stream-prefix", events.DefaultPrefix, "First subject token of the events.")
	fs.StringVar(&o.stream.Storage, "stream-storage", "file", "Stream storage: file or memory.")
	fs.DurationVar(&o.stream.MaxAge, "stream-max-age", events.DefaultMaxAge, "How long events are kept.")
	fs.Int64Var(&o.stream.MaxBytes, "stream-max-bytes", 0, "Stream size bound in bytes (0: unlimited).")
	fs.IntVar(&o.stream.Replicas, "stream-replicas", 1, "Stream replicas (external NATS clusters).")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", 30*time.Second, "How long sessions get to detach on shutdown.")
	fs.StringVar(&o.images.Workspace, "workspace-image", "agent-operator/workspace:dev", "Default workspace image.")
	fs.StringVar(&o.images.Executor, "executor-image", "agent-operator/executor:dev", "Image holding /executor-sidecar.")
	fs.StringVar(&o.pullPol, "image-pull-policy", string(corev1.PullIfNotPresent), "Pull policy of workspace pods.")
	fs.IntVar(&o.verbosity, "v", 0, "Log verbosity.")
	fs.IntVar(&o.maxSessions, "max-sessions-per-namespace", 0, "Concurrent top-level sessions per namespace; more wait Pending (QuotaExceeded). 0: unlimited. The namespace annotation agent-operator.dev/max-sessions can lower it.")
	fs.BoolVar(&o.priorityQueue, "priority-queue", true, "Use controller-runtime's priority work queue: a newly created session is reconciled before the periodic requeues (quota polls) and the initial list of a restart.")
	fs.IntVar(&o.reconcilers, "max-concurrent-reconciles", 4, "How many sessions the controller reconciles at once (each session by one worker at a time).")
	fs.IntVar(&o.admissionWorkers, "admission-workers", agentsession.DefaultAdmissionWorkers, "How many new sessions get their first status (Pending) at once, by workers of their own, so a session created behind a burst is seen at once; 0 leaves first statuses to the --max-concurrent-reconciles workers.")
	fs.StringVar(&o.sessionClass, "session-class", "", "Handle only the AgentSessions labelled agent-operator.dev/class=VALUE; empty handles the unlabelled ones (the default install).")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose AgentSessions this install handles (default: all).", func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				o.watchNamespaces = append(o.watchNamespaces, ns)
			}
		}
		return nil
	})
	fs.StringVar(&o.install, "install-id", os.Getenv("POD_NAMESPACE"), "Identity of this install in session claims, shared by its replicas (the chart sets namespace/release).")
	fs.DurationVar(&o.claimDuration, "session-claim-duration", claim.DefaultDuration, "How long a session's claim lasts without renewal; another install takes a session over only after it.")
	fs.DurationVar(&o.reportUnserved, "report-unserved-after", time.Minute, "Report AgentSessions of other classes that no install took up this long after their creation (phase Pending, condition Accepted=False/ClassNotServed, a Warning Event); 0 disables.")
	fs.DurationVar(&o.statusInterval, "status-interval", agentsession.DefaultStatusInterval, "How often, at most, a running session's progress-only status changes (counters, tokens, cost, result, plan, status.children and the tree figures) are written; phase and condition changes and a session's end are written at once. 0 writes every change.")
	fs.BoolVar(&o.shardSessions, "shard-sessions", false, "Every replica drives a share of the sessions (rendezvous hashing over the replicas' membership Leases) instead of the leader driving all; needs --nats-url (one journal for all replicas). Leader election, if on, then covers only the warm pools.")
	fs.DurationVar(&o.replicaLease, "replica-lease-duration", shard.DefaultDuration, "With --shard-sessions: how long a replica stays a member without renewing its membership Lease.")
	fs.StringVar(&o.replicaNamespace, "replica-namespace", os.Getenv("POD_NAMESPACE"), "With --shard-sessions: the namespace of the replicas' membership Leases (the release namespace).")
	pricesFile := fs.String("prices-file", "", "YAML price table (the chart's pricing values) overriding and extending the built-in prices.")
	var pools []string
	fs.Func("warm-pool", "Keep pre-started workspace pods for new sessions: NAMESPACE=SIZE or NAMESPACE=SIZE:IMAGE (repeatable).",
		func(v string) error { pools = append(pools, v); return nil })
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.warmPools, err = agentsession.ParseWarmPools(pools); err != nil {
		return o, fmt.Errorf("--warm-pool: %w", err)
	}
	switch p := corev1.PullPolicy(o.pullPol); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		o.images.PullPolicy = p
	default:
		return o, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", o.pullPol)
	}
	if o.maxSessions < 0 {
		return o, fmt.Errorf("--max-sessions-per-namespace %d: want 0 (unlimited) or more", o.maxSessions)
	}
	if o.reconcilers < 1 {
		return o, fmt.Errorf("--max-concurrent-reconciles %d: want 1 or more", o.reconcilers)
	}
	if o.reportUnserved < 0 {
		return o, fmt.Errorf("--report-unserved-after %s: want 0 (never) or more", o.reportUnserved)
	}
	if o.admissionWorkers < 0 {
		return o, fmt.Errorf("--admission-workers %d: want 0 (none of their own) or more", o.admissionWorkers)
	}
	if o.statusInterval < 0 {
		return o, fmt.Errorf("--status-interval %s: want 0 (every change at once) or more", o.statusInterval)
	}
	if o.claimDuration < 3*time.Second {
		return o, fmt.Errorf("--session-claim-duration %s: want at least 3s", o.claimDuration)
	}
	if o.install == "" {
		o.install = "agent-operator"
	}
	if o.shardSessions {
		switch {
		case o.natsURL == "":
			return o, errors.New("--shard-sessions needs an external NATS (--nats-url): each replica's embedded NATS would be a journal of its own; with the chart set nats.mode=external")
		case o.replicaNamespace == "":
			return o, errors.New("--shard-sessions needs --replica-namespace (or POD_NAMESPACE) for the replicas' membership Leases")
		case o.replicaLease < 3*time.Second:
			return o, fmt.Errorf("--replica-lease-duration %s: want at least 3s", o.replicaLease)
		}
	}
	o.prices = pricing.Default()
	if *pricesFile != "" {
		data, err := os.ReadFile(*pricesFile)
		if err != nil {
			return o, fmt.Errorf("--prices-file: %w", err)
		}
		if o.prices, err = pricing.Parse(data); err != nil {
			return o, fmt.Errorf("--prices-file %s: %w", *pricesFile, err)
		}
	}
	if err := o.stream.Validate(); err != nil {
		return o, fmt.Errorf("stream flags: %w", err)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.verbosity)))
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	log := ctrl.Log.WithName("setup")
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), agentsv1.AddToScheme(scheme)); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	nc, embedded, stopNATS, err := connectNATS(ctx, o)
	if err != nil {
		return err
	}
	defer stopNATS()
	pub, err := events.NewPublisher(nc, events.PublisherOptions{Stream: o.stream, OnStreamRestored: func() {
		ctrl.Log.WithName("events").Error(events.ErrStreamLost, "The events stream was gone and was made again; the events stored before are lost",
			"stream", o.stream.Name)
	}})
	if err != nil {
		return err
	}
	if err := pub.EnsureStream(ctx); err != nil {
		return fmt.Errorf("ensure events stream: %w", err)
	}

	restCfg := ctrl.GetConfigOrDie()
	stopProbes := serveWaitingProbes(o.probeAddr, log)
	err = waitForAPIServer(ctx, restCfg, log, time.Second, 10*time.Second)
	stopProbes()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         o.leaderElect,
		LeaderElectionID:       o.leaderElectionID,
		Controller:             config.Controller{UsePriorityQueue: ptr.To(o.priorityQueue)},
		// Only the operator's pods (workspace and warm pool) are cached, not every pod of the cluster.
		Cache: cacheOptions(o.watchNamespaces),
		// Read only when a workspace NetworkPolicy is written: no cluster-wide informers for them.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{
			&corev1.Service{}, &discoveryv1.EndpointSlice{},
		}}},
	})
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	// Metrics in controller-runtime's registry, served on --metrics-bind-address.
	metricsRec, err := metrics.New(ctrlmetrics.Registry, o.prices)
	if err != nil {
		return err
	}
	pool, err := k8senv.NewPool(k8senv.Config{REST: mgr.GetConfig(), Log: ctrl.Log.WithName("k8senv"),
		OnReconnect: metricsRec.ExecStreamReconnected, OnOpen: metricsRec.SessionStartStage})
	if err != nil {
		return fmt.Errorf("new exec pool: %w", err)
	}
	defer pool.Close()

	// Traces are exported only when the standard OTEL_* variables ask for it.
	otel.SetLogger(ctrl.Log.WithName("otel"))
	tp, stopTracing, err := tracing.Setup(ctx)
	if err != nil {
		return fmt.Errorf("set up tracing: %w", err)
	}
	tracer := tracing.NewTracer(tp)
	defer func() { // after mgr.Start returned: the runner has detached every session
		tracer.Close() // ends the spans of detached sessions at their last event
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Error(err, "Could not flush traces")
		}
	}()

	if err := metricsRec.CollectSessions(sessionPhases(mgr.GetCache())); err != nil {
		return err
	}

	me := claim.Holder{Install: o.install, Pod: podName()}
	rec := agentsession.NewReconciler()
	run, err := runner.New(runner.Options{
		// Claims are taken on fresh reads; the reconciler's check reads the cache.
		Claims: &claim.Claims{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Me: me, Duration: o.claimDuration,
			Sharded: o.shardSessions},
		Reader:    mgr.GetAPIReader(),
		Journals:  pub,
		Clients:   runner.ProviderClients,
		Envs:      runner.K8sEnvFactory(pool),
		Client:    client.WithFieldOwner(mgr.GetClient(), "agent-operator"),
		Informers: mgr.GetCache(),
		Notify:    rec.Notify,
		Log:       ctrl.Log.WithName("runner"),
		// The last runner of a pod (an idle, failed or suspended session) closes its exec stream.
		ReleaseEnv: pool.Release,
		// Each input that ends Succeeded records (and pushes) the session's change.
		Changes:      &changes.Recorder{Store: pub.ChangesStore(), Secrets: changes.SecretsFrom(mgr.GetAPIReader()), Log: ctrl.Log.WithName("changes")},
		Prices:       o.prices,
		Observers:    []runner.Observer{tracer, metricsRec},
		JournalState: metricsRec.SetJournalAvailable,
		LLMRetries:   metricsRec.LLMRetryHook,
		StartStage:   metricsRec.SessionStartStage,
		// Progress reaches the controller as often as it writes it (0: the runner's default).
		NotifyInterval: o.statusInterval,
	})
	if err != nil {
		return err
	}
	rec.Client = client.WithFieldOwner(mgr.GetClient(), "agent-operator")
	rec.APIReader = mgr.GetAPIReader()
	rec.Scheme = mgr.GetScheme()
	rec.Recorder = mgr.GetEventRecorder("agent-operator")
	rec.Runner = run
	rec.Images = o.images
	rec.WarmPools = o.warmPools
	if len(o.warmPools) > 0 {
		// Claimed pool pods start with the spare stream the pool kept open.
		rec.WarmStreams = pool
	}
	rec.EventsPrefix = o.stream.Prefix
	rec.MaxSessionsPerNamespace = o.maxSessions
	rec.MaxConcurrentReconciles = o.reconcilers
	rec.AdmissionWorkers = o.admissionWorkers
	rec.Claims = &claim.Claims{Client: mgr.GetClient(), Reader: mgr.GetClient(), Me: me, Duration: o.claimDuration,
		Sharded: o.shardSessions}
	rec.Class = o.sessionClass
	rec.ReportUnservedAfter = o.reportUnserved
	rec.StatusInterval = o.statusInterval
	rec.Metrics = metricsRec
	if o.shardSessions {
		m := &shard.Membership{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.replicaNamespace,
			Install: o.install, Pod: me.Pod, Duration: o.replicaLease, Log: ctrl.Log.WithName("replicas")}
		m.OnChange = func(shard.Ring) {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := rec.Resync(sctx); err != nil {
				log.Error(err, "Could not look again at the sessions after the replicas changed")
			}
		}
		rec.Shard = m
		if err := mgr.Add(m); err != nil {
			return err
		}
	}
	if err := metricsRec.CollectDriven(run.Sessions); err != nil {
		return err
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		return err
	}
	// Detach every session on shutdown so another replica resumes it from
	// the journal (on every replica when they shard the sessions).
	detach := func(ctx context.Context) error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), o.shutdown)
		defer cancel()
		return run.Shutdown(sctx)
	}
	var detachAll manager.Runnable = manager.RunnableFunc(detach) // the leader's
	if o.shardSessions {
		detachAll = runnable(detach)
	}
	if err := mgr.Add(detachAll); err != nil {
		return err
	}
	if embedded != nil && o.natsAuth && o.credsAddr != "0" {
		if err := mgr.Add(readerCredentials(o.credsAddr, embedded, restCfg, o.readerTTL, ctrl.Log.WithName("reader-credentials"))); err != nil {
			return err
		}
	}
	if err := errors.Join(mgr.AddHealthzCheck("healthz", healthz.Ping), mgr.AddReadyzCheck("readyz", natsReady(nc))); err != nil {
		return fmt.Errorf("add probes: %w", err)
	}
	// Ready only once a session can be created: `helm install --wait` then means it.
	if ns := admissionNamespace(o.watchNamespaces); ns != "" {
		check := &sessionAdmission{Client: mgr.GetClient(), Namespace: ns, Class: o.sessionClass,
			Log: ctrl.Log.WithName("readiness")}
		if err := mgr.AddReadyzCheck("sessions-admitted", check.Check); err != nil {
			return fmt.Errorf("add probes: %w", err)
		}
	}
	log.Info("Starting manager", "embeddedNATS", o.natsURL == "", "shardSessions", o.shardSessions)
	return mgr.Start(ctx)
}

// admissionNamespace is where the readiness check's dry run is made: the
// first watched namespace, else the manager's own (POD_NAMESPACE); "" when
// neither is known (a manager run outside the cluster), and then there is
// no check.
func admissionNamespace(watched []string) string {
	if len(watched) > 0 {
		return watched[0]
	}
	return os.Getenv("POD_NAMESPACE")
}

// cacheOptions are the controller's cache options, limited to namespaces
// when any are given.
func cacheOptions(namespaces []string) cache.Options {
	opts := agentsession.CacheOptions()
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// podName is this manager's pod (POD_NAME from the downward API), else the host name.
func podName() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

// connectNATS dials --nats-url, or starts the embedded server (returned too).
func connectNATS(ctx context.Context, o options) (*nats.Conn, *events.Embedded, func(), error) {
	if o.natsURL != "" {
		nc, err := events.Connect(ctx, o.natsURL, o.natsConn)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("connect nats: %w", err)
		}
		return nc, nil, nc.Close, nil
	}
	srv, err := events.StartEmbedded(ctx, events.EmbeddedOptions{StoreDir: o.storeDir, Port: o.natsPort, Host: o.natsHost,
		Auth: o.natsAuth, Stream: o.stream})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start embedded nats: %w", err)
	}
	nc, err := srv.Connect()
	if err != nil {
		srv.Shutdown()
		return nil, nil, nil, fmt.Errorf("connect embedded nats: %w", err)
	}
	return nc, srv, func() { nc.Close(); srv.Shutdown() }, nil
}

func natsReady(nc *nats.Conn) healthz.Checker {
	return func(_ *http.Request) error {
		if !nc.IsConnected() {
			return errors.New("nats is not connected")
		}
		return nil
	}
}

// sessionPhases lists the sessions' phases from the manager's informer
// cache for the sessions-by-phase gauges; Since is when the Ready condition
// last changed, or the creation for a session without one.
func sessionPhases(c client.Reader) metrics.SessionLister {
	return func() ([]metrics.SessionPhase, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var list agentsv1.AgentSessionList
		// Only read: the cache's own objects, not a deep copy of every session
		// per scrape.
		if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		out := make([]metrics.SessionPhase, 0, len(list.Items))
		for i := range list.Items {
			s := &list.Items[i]
			since := s.CreationTimestamp.Time
			for _, c := range s.Status.Conditions {
				if c.Type == agentsv1.ConditionReady {
					since = c.LastTransitionTime.Time
				}
			}
			out = append(out, metrics.SessionPhase{Namespace: s.Namespace, Phase: string(s.Status.Phase), Since: since})
		}
		return out, nil
	}
}
