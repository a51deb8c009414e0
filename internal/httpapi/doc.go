// Package httpapi serves kin.Service over HTTP under /v1/: JSON in and out,
// errors as {"code","message"} with the status from one table (status.go),
// and the operator-token check for TCP listeners. It holds no state of its
// own and never talks to the store: it only calls the Service.
package httpapi
