// A second S3 implementation for Basalt's tests: objvols built from an endpoint that is
// not Basalt's own gateway (issue 14). gofakes3 (MIT) is the engine of `rclone serve s3`;
// MinIO, which the issue names, is AGPL-licensed and not among the Go modules served to
// these machines. gofakes3 ignores If-Match on GET, which is what the objvol reader's ETag
// check exists for. Built by scripts/install-test-deps.sh.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve S3 on")
	cert := flag.String("tls-cert", "", "serve https with this certificate (PEM)")
	key := flag.String("tls-key", "", "and this key (PEM)")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// The address on one line, for the test that started it.
	os.Stdout.WriteString("listening on " + ln.Addr().String() + "\n")
	s3 := gofakes3.New(s3mem.New()).Server()
	// After a request with an empty body gofakes3 leaves its connection stalled: the next
	// request on it waits a minute. Such connections are closed instead.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			w.Header().Set("Connection", "close")
		}
		s3.ServeHTTP(w, r)
	})
	if *cert != "" {
		log.Fatal(http.ServeTLS(ln, handler, *cert, *key))
	}
	log.Fatal(http.Serve(ln, handler))
}
