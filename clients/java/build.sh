#!/usr/bin/env bash
# Builds the Java client with the JDK and Debian's jars only (no Maven, nothing downloaded):
# compiles src/generated (the stubs), src/main (io.zkgate), src/examples and src/test into
# build/, and writes the runtime classpath (build/classes plus the jars, ':'-separated, one
# line) to build/classpath. Run the agent or the example with
#   java -cp "$(cat clients/java/build/classpath)" io.zkgate.examples.Agent elect NAME
# and the tests with Debian's JUnit console launcher (see README.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$here/build"
jars=/usr/share/java

# What gRPC 1.41 (grpc-netty) and protobuf 3.21 need at run time, as Debian packages them:
# libgrpc-java, libprotobuf-java, libnetty-java, libguava-java (it bundles failureaccess),
# libperfmark-java, libgoogle-gson-java, libgoogle-common-protos-java.
runtime=(
    grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
    protobuf guava perfmark-api gson proto-google-common-protos
    netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
    netty-handler netty-handler-proxy netty-resolver netty-transport
)
# Compile time only: javax.annotation.Generated (source retention) that the gRPC plugin writes,
# from libgeronimo-annotation-1.3-spec-java; JUnit 5 from junit5.
compile_only=(geronimo-annotation-1.3-spec junit-jupiter-api apiguardian-api opentest4j)

cp=""
missing=()
for j in "${runtime[@]}"; do
    [ -f "$jars/$j.jar" ] || missing+=("$j")
    cp="$cp:$jars/$j.jar"
done
ccp="$cp"
for j in "${compile_only[@]}"; do
    [ -f "$jars/$j.jar" ] || missing+=("$j")
    ccp="$ccp:$jars/$j.jar"
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build.sh: missing jars in $jars: ${missing[*]}" >&2
    echo "  apt-get install libgrpc-java libprotobuf-java libnetty-java libguava-java" \
        "libperfmark-java libgoogle-gson-java libgoogle-common-protos-java" \
        "libgeronimo-annotation-1.3-spec-java junit5" >&2
    exit 1
fi

rm -rf "$build"
mkdir -p "$build/classes"
find "$here/src" -name '*.java' >"$build/sources"
javac -nowarn -encoding UTF-8 --release 17 -Xlint:-options \
    -cp "${ccp#:}" -d "$build/classes" @"$build/sources"
echo "$build/classes$cp" >"$build/classpath"
