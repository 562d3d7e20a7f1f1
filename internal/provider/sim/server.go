package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// shutdownGrace bounds the shutdown started by the end of Start's context.
const shutdownGrace = 5 * time.Second

// Server serves a Simulator over HTTP. Create one with Start.
type Server struct {
	sim    *Simulator
	srv    *http.Server
	url    string
	cancel context.CancelFunc // ends every request context
	served chan struct{}      // closed when Serve has returned

	stopOnce sync.Once
	stopErr  error
}

// Start serves a new Simulator configured by opts on addr ("127.0.0.1:0"
// picks a free loopback port; empty means that). It returns once the
// listener is open, so URL is usable at once. The server stops when ctx ends
// or Shutdown or Close is called. Stopping first ends every request context,
// so slow and hanging requests are dropped without an answer.
func Start(ctx context.Context, addr string, opts Options) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sim: listen on %s: %w", addr, err)
	}
	sim := New(opts)
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{
		sim:    sim,
		url:    "http://" + dialAddr(ln.Addr()),
		cancel: cancel,
		served: make(chan struct{}),
		srv: &http.Server{
			Handler:           sim,
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return base },
			ErrorLog:          slog.NewLogLogger(sim.log.Handler(), slog.LevelWarn),
		},
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			sim.log.Error("sim: serve failed", "err", err)
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
			defer cancel()
			_ = s.Shutdown(sctx)
		case <-s.served:
		}
	}()
	sim.log.Info("sim: listening", "url", s.url)
	return s, nil
}

// dialAddr returns an address a client can dial for a listener address,
// replacing an unspecified IP (0.0.0.0, ::) with loopback.
func dialAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}

// URL returns the server's base URL, such as "http://127.0.0.1:40123".
func (s *Server) URL() string { return s.url }

// Simulator returns the Simulator the server serves.
func (s *Server) Simulator() *Simulator { return s.sim }

// Shutdown stops the server: it closes the listener, ends every request
// context (dropping slow and hanging requests), and waits for the handlers
// to return or ctx to end, whichever is first; then it closes what is left
// and reports ctx's error. Only the first call to Shutdown or Close (or the
// end of Start's context) does the work; later calls wait for it and return
// its result.
func (s *Server) Shutdown(ctx context.Context) error { return s.stop(ctx, true) }

// Close stops the server at once, closing every connection without waiting
// for handlers. It returns once the server has stopped serving.
func (s *Server) Close() error { return s.stop(context.Background(), false) }

// stop stops the server once; wait chooses a graceful shutdown bounded by
// ctx over closing every connection at once.
func (s *Server) stop(ctx context.Context, wait bool) error {
	s.stopOnce.Do(func() {
		s.cancel()
		if !wait {
			if err := s.srv.Close(); err != nil {
				s.stopErr = fmt.Errorf("sim: close: %w", err)
			}
		} else if err := s.srv.Shutdown(ctx); err != nil {
			s.stopErr = fmt.Errorf("sim: shutdown: %w", err)
			_ = s.srv.Close() // the listener is closed already; drop what is left
		}
		<-s.served
	})
	return s.stopErr
}
