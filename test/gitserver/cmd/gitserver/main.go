// Command gitserver serves bare git repositories over smart HTTP with basic
// authentication, for the e2e suite (see test/gitserver). It runs in a pod
// of the workspace image, which has git.
//
//	gitserver -listen :8080 -root /srv/git -repo demo -seed /seed
//
// The password is read from $GITSERVER_PASSWORD, the user from -user.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agent-operator/agent-operator/test/gitserver"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	root := flag.String("root", "/tmp/git", "directory of the bare repositories")
	repo := flag.String("repo", "", "create the repository <root>/<repo>.git at start")
	seed := flag.String("seed", "", "files of the first commit of -repo")
	user := flag.String("user", "", "basic-auth user (empty: no authentication)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := os.MkdirAll(*root, 0o755); err != nil {
		log.Fatal(err)
	}
	if *repo != "" {
		if err := gitserver.CreateRepo(ctx, *root, *repo, *seed); err != nil {
			log.Fatal(err)
		}
	}
	backend, err := gitserver.Backend(ctx)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *listen, Handler: gitserver.Handler(*root, backend, *user, os.Getenv("GITSERVER_PASSWORD")),
		ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("serving %s on %s", *root, *listen)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
