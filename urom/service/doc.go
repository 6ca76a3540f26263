// Package service is the UROM service (rdmo dpu): a daemon that lists the
// op-handler plugins it has, runs workers as separate OS processes with a
// chosen plugin set (and is the body of such a process, ServeWorker),
// carries commands from hosts to those workers and their answers back,
// runs the service's side of the hello and authentication, drains
// gracefully, and serves Prometheus metrics of itself and its workers'
// processes. The protocol and the host's client are package urom.
package service
