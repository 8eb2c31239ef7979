// grpc-health: a real gRPC server and client (grpc-go's health service, which needs no
// generated code of ours) for fulcrum's tests of HTTP/2 to backends.
//
//	grpc-health serve ADDR         serve grpc.health.v1.Health on ADDR (h2c), "" SERVING
//	grpc-health check ADDR N SVC   call Check(SVC) N times on one connection to ADDR and print
//	                               one line per call: the status, or the error's gRPC code
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "serve" {
		serve(os.Args[2])
		return
	}
	if len(os.Args) == 5 && os.Args[1] == "check" {
		n, err := strconv.Atoi(os.Args[3])
		if err != nil || n < 1 {
			fail("N must be a positive number, not %q", os.Args[3])
		}
		check(os.Args[2], n, os.Args[4])
		return
	}
	fail("usage: grpc-health serve ADDR | grpc-health check ADDR N SERVICE")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "grpc-health: "+format+"\n", args...)
	os.Exit(2)
}

func serve(addr string) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		fail("listen on %s: %v", addr, err)
	}
	// The address actually bound (ADDR may say port 0), for the test to read.
	fmt.Println(listener.Addr().String())
	server := grpc.NewServer()
	healthpb.RegisterHealthServer(server, health.NewServer())
	if err := server.Serve(listener); err != nil {
		fail("serve: %v", err)
	}
}

func check(addr string, n int, service string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("connect to %s: %v", addr, err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reply, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err != nil {
			fmt.Printf("error %s: %s\n", status.Code(err), status.Convert(err).Message())
			continue
		}
		fmt.Println(reply.GetStatus().String())
	}
}
