package live

import (
	"embed"
	"io/fs"
	"net/http"
)

// static holds the page: plain HTML, JS and CSS, no build step.
//
//go:embed static
var static embed.FS

func (s *Server) mountPage() {
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", files))
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, sub, "index.html")
	})
}
