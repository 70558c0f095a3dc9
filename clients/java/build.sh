#!/usr/bin/env bash
# Builds the Java client with the JDK and Debian's jars only (no Maven, nothing downloaded):
# compiles src/generated (the stubs, into build/stubs, only when they changed), src/main
# (io.zkgate), src/examples and src/test (into build/classes), and writes the runtime classpath
# (build/classes, build/stubs and the jars, ':'-separated, one line) to build/classpath.
# Run the agent or the example with
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

# javac with the C1 compiler only and a serial GC starts and finishes faster on a small machine.
javac_() { javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -nowarn -encoding UTF-8 --release 17 "$@"; }

# The generated stubs change only with the protos: compile them once into build/stubs and again
# only when a stub source is newer than that build.
stamp="$build/stubs/.built"
if [ ! -f "$stamp" ] || [ -n "$(find "$here/src/generated" -name '*.java' -newer "$stamp" | head -1)" ]; then
    rm -rf "$build/stubs"
    mkdir -p "$build/stubs"
    find "$here/src/generated" -name '*.java' >"$build/stubs.sources"
    javac_ -cp "${ccp#:}" -d "$build/stubs" @"$build/stubs.sources"
    touch "$stamp"
fi
rm -rf "$build/classes"
mkdir -p "$build/classes"
find "$here/src/main" "$here/src/examples" "$here/src/test" -name '*.java' >"$build/sources"
javac_ -cp "$build/stubs$ccp" -d "$build/classes" @"$build/sources"
echo "$build/classes:$build/stubs$cp" >"$build/classpath"
