#!/bin/sh
# Compiler launcher of the header self-containment TUs (cmake/JitembedComponents.cmake): the compiler's front end
# only (-fsyntax-only: parsing, name lookup, overload resolution, template instantiation, the depfile; no code
# generation), then an empty object file where the build tool expects one. A TU that is only preprocessed (-E,
# a deprecated forwarding header) runs as given.
out=
prev=
for a in "$@"; do
  [ "$a" = "-E" ] && exec "$@"
  [ "$prev" = "-o" ] && out="$a"
  prev="$a"
done
"$@" -fsyntax-only || exit $?
if [ -n "$out" ]; then : > "$out"; fi
