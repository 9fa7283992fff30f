// Package dsort sorts gensort records spread over several machines: one
// master and N workers talking gRPC (protocol in dsort/dsortpb), each worker
// sorting its share with extsort. See README.md for the vocabulary, a
// diagram, the skew scheme and the recovery protocol.
package dsort
