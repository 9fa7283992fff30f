#!/bin/sh
exec go tool protoc-gen-go "$@"
