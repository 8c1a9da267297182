#!/usr/bin/env python3
"""Linux checks of the Objective-C++ Metal device (cpp/metal/*.mm), which only a Mac
can build.

1. Syntax/type check: clang compiles each file with -fsyntax-only against
   tests/objc/include/Metal/Metal.h (declarations of just the Metal and Foundation API
   the files use), twice: as the macOS 15 SDK declares them and as the macOS 14 SDK
   (Xcode 15, GitHub's macos-14 image) does, without what macOS 15 introduced. A
   declaration of the newer SDK must sit under an SDK-version #if; @available alone is
   a run-time check and does not compile against the older SDK.
2. Selector check: every selector the files send (the ObjCMessageExpr nodes of clang's
   JSON AST of namespace metalrt::metal, where all the device code lives) must be in
   Apple's published API as listed in metal-cpp's selector tables
   (_MTL_PRIVATE_DEF_SEL / _NS_PRIVATE_DEF_SEL). The declarations header alone cannot
   show this: it is ours, so a misspelt selector could be misdeclared there too.
   metal-cpp comes from the sdist of the PyPI package pymetal-cpp (fetched with pip,
   cached under build/metal-cpp).
3. Autorelease pools: a message that returns an object (or an inner pointer such as
   UTF8String) and is not of the owning alloc/new/copy/mutableCopy/init families
   (Cocoa's memory-management naming rules) hands back an autoreleased object. Python
   threads have no pool, so each such send must sit lexically inside an
   @autoreleasepool block, or the object lives until the thread exits.
4. ARC guard: each file must refuse to compile without -fobjc-arc (#error).
5. Nil results: a command buffer or compute encoder that Metal fails to make is nil,
   and every message to nil is a silent no-op (dispatches would vanish). So each send
   of those selectors must initialise a variable that the code then tests (`!v`,
   `v == nil`, `v != nil`).
6. Math settings: a block that sets MTLCompileOptions' mathMode must also set
   mathFloatingPointFunctions, whose default is Fast whatever the mode (Apple's
   MTLMathFloatingPointFunctions documentation), or run-time compiled kernels would
   round unlike the metallib (-fno-fast-math) and the simulated device.

Exits non-zero, naming the file and the problem, on any failure. tests/run.sh runs it.
"""
import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
DECLS = ROOT / "tests" / "objc" / "include"
METAL_CPP_SDIST = "pymetal-cpp==0.1.5"   # vendors metal-cpp under thirdparty/metal-cpp
METAL_CPP_CACHE = ROOT / "build" / "metal-cpp"
# Proves the selector check catches a selector that is not Apple's.
WRONG_SELECTOR_FIXTURE = ROOT / "tests" / "objc" / "fixtures" / "wrong_selector.mm"
# Proves the pool check catches an autoreleased result outside a pool, and only that.
MISSING_POOL_FIXTURE = ROOT / "tests" / "objc" / "fixtures" / "missing_pool.mm"
MISSING_POOL_EXPECTED = ["commandBuffer"]
OWNING_FAMILY = re.compile(r"^_*(alloc|new|copy|mutableCopy|init)(?![a-z])")
# Objective-C object pointers (id, id<P>, NSString *, NSArray<...> *) and C strings.
RETURNS_OBJECT = re.compile(r"^(id\b|[A-Z]\w*\s*(<.*>)?\s*\*|const char \*)")
# Proves the nil check catches an unchecked compute encoder, and only that.
MISSING_NIL_CHECK_FIXTURE = ROOT / "tests" / "objc" / "fixtures" / "missing_nil_check.mm"
MISSING_NIL_CHECK_EXPECTED = ["computeCommandEncoder"]
MUST_NIL_CHECK = {"commandBuffer", "computeCommandEncoder"}
# Proves the SDK check catches a macOS 15 declaration used under @available only.
UNGUARDED_SDK_FIXTURE = ROOT / "tests" / "objc" / "fixtures" / "unguarded_sdk15.mm"
# Proves the math check catches safe mode without precise functions, and only that.
FAST_FUNCTIONS_FIXTURE = ROOT / "tests" / "objc" / "fixtures" / "fast_math_functions.mm"
FAST_FUNCTIONS_EXPECTED = ["ModeOnly"]
# The SDKs a .mm must compile against: name -> METALRT_TEST_SDK (None: the header's newest).
SDKS = {"macOS 15 SDK": None, "macOS 14 SDK": 140000}
SELECTOR_DEF = re.compile(r'_(?:NS|MTL|CA|MTLFX)_PRIVATE_DEF_SEL\(\s*\w+\s*,\s*"([^"]+)"')


def clang_command(source, sdk=None):
    clang = shutil.which("clang++")
    if clang is None:
        sys.exit("[check_objc] clang++ not found (tests/run.sh installs clang)")
    # -fobjc-runtime: ARC needs a modern runtime; Linux clang defaults to the legacy one.
    return [clang, "-x", "objective-c++", "-std=c++17", "-fobjc-arc", "-fblocks",
            "-fobjc-runtime=macosx-13.0", "-Wall", "-Wextra", "-Werror",
            "-I", str(DECLS), "-I", str(ROOT / "cpp"), "-I", str(ROOT / "cpp" / "include"),
            *([f"-DMETALRT_TEST_SDK={sdk}"] if sdk else []), str(source)]


def syntax_check(source, sdk=None):
    """clang's diagnostics for `source` against the SDK `sdk` (METALRT_TEST_SDK), or ''
    when it type-checks."""
    result = subprocess.run(clang_command(source, sdk) + ["-fsyntax-only"], capture_output=True, text=True)
    return "" if result.returncode == 0 else (result.stderr or result.stdout)


def sdk_failures(source):
    """{SDK name: clang's diagnostics} for each SDK of SDKS `source` does not compile against."""
    return {name: errors for name, sdk in SDKS.items() if (errors := syntax_check(source, sdk))}


def mode_without_functions(source):
    """Names of the functions holding a block that sends setMathMode: but not
    setMathFloatingPointFunctions: (the sends directly in one compound statement)."""
    flagged = []
    for root in ast_roots(source):
        for function in walk(root):
            if function.get("kind") not in ("FunctionDecl", "CXXMethodDecl"):
                continue
            for block in walk(function):
                if block.get("kind") != "CompoundStmt":
                    continue
                sent, stack = set(), list(block.get("inner", []))
                while stack:
                    node = stack.pop()
                    if node.get("kind") == "CompoundStmt":
                        continue   # its own block
                    if node.get("kind") == "ObjCMessageExpr":
                        sent.add(node["selector"])
                    stack.extend(node.get("inner", []))
                if "setMathMode:" in sent and "setMathFloatingPointFunctions:" not in sent:
                    flagged.append(function.get("name", "?"))
    return sorted(set(flagged))


def ast_roots(source):
    """clang's JSON AST of the declarations in namespace metalrt::metal of `source`."""
    command = clang_command(source) + ["-fsyntax-only", "-Xclang", "-ast-dump=json",
                                       "-Xclang", "-ast-dump-filter=metalrt::metal"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"[check_objc] {source}: clang AST dump failed:\n{result.stderr}")
    roots = []
    decoder, text, at = json.JSONDecoder(), result.stdout, 0
    # One JSON document per matching declaration.
    while (at := text.find("{", at)) != -1:
        node, at = decoder.raw_decode(text, at)
        roots.append(node)
    return roots


def walk(node):
    """Every node of the AST below (and including) `node`."""
    stack = [node]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.get("inner", []))


def messages(source):
    """(selector, return type, inside an @autoreleasepool) of every Objective-C message
    `source` sends in namespace metalrt::metal, from clang's AST."""
    found = []
    for node in ast_roots(source):
        stack = [(node, False)]
        while stack:
            node, pooled = stack.pop()
            if node.get("kind") == "ObjCMessageExpr":
                found.append((node["selector"], node.get("type", {}).get("qualType", ""), pooled))
            pooled = pooled or node.get("kind") == "ObjCAutoreleasePoolStmt"
            stack.extend((child, pooled) for child in node.get("inner", []))
    return found


def sent_selectors(source):
    """The selectors of every Objective-C message `source` sends."""
    return {selector for selector, _, _ in messages(source)}


def unpooled_autoreleased(source):
    """Selectors of sends returning an autoreleased result outside any pool block."""
    return sorted(selector for selector, returns, pooled in messages(source)
                  if not pooled and RETURNS_OBJECT.match(returns) and not OWNING_FAMILY.match(selector))


def unchecked_nil_results(source):
    """Selectors of MUST_NIL_CHECK sends whose result is not held in a variable that a
    `!`, `==` or `!=` expression then tests."""
    roots = ast_roots(source)
    tested = set()   # ids of declarations referenced under a !, == or !=
    for root in roots:
        for node in walk(root):
            if node.get("opcode") in ("!", "==", "!="):
                tested.update(n["referencedDecl"]["id"] for n in walk(node)
                              if n.get("kind") == "DeclRefExpr")
    checked, sends = set(), []
    for root in roots:
        for node in walk(root):
            if node.get("kind") == "ObjCMessageExpr" and node["selector"] in MUST_NIL_CHECK:
                sends.append(node)
            if node.get("kind") == "VarDecl" and node.get("id") in tested:
                checked.update(id(n) for n in walk(node) if n.get("kind") == "ObjCMessageExpr")
    return sorted(n["selector"] for n in sends if id(n) not in checked)


def arc_guard_missing(source):
    """True when `source` compiles without ARC (it must #error instead)."""
    result = subprocess.run(clang_command(source) + ["-fsyntax-only", "-fno-objc-arc"],
                            capture_output=True, text=True)
    return result.returncode == 0 or "requires ARC" not in result.stderr


def metal_cpp_dir():
    """metal-cpp's headers, from the cached pymetal-cpp sdist (fetched on first use)."""
    cached = METAL_CPP_CACHE / "metal-cpp"
    if (cached / "Metal").is_dir():
        return cached
    download = METAL_CPP_CACHE / "sdist"
    download.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
               "-d", str(download), METAL_CPP_SDIST]
    # pip prepares the sdist's metadata; without isolation that reuses the installed
    # scikit-build-core and nanobind (our own build backend) instead of fetching them.
    result = subprocess.run(command + ["--no-build-isolation"], capture_output=True, text=True)
    if result.returncode != 0:
        result = subprocess.run(command, capture_output=True, text=True)
    sdists = sorted(download.glob("pymetal_cpp-*.tar.gz"))
    if result.returncode != 0 or not sdists:
        sys.exit(f"[check_objc] cannot fetch metal-cpp (pip download {METAL_CPP_SDIST}):\n"
                 f"{result.stderr}")
    with tarfile.open(sdists[-1]) as archive:
        members = [m for m in archive.getmembers()
                   if "/thirdparty/metal-cpp/" in m.name and m.isfile() and m.name.endswith(".hpp")]
        if not members:
            sys.exit(f"[check_objc] {sdists[-1].name} holds no thirdparty/metal-cpp headers")
        for member in members:
            relative = member.name.split("/thirdparty/metal-cpp/", 1)[1]
            target = cached / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.extractfile(member).read())
    return cached


def published_selectors(metal_cpp):
    selectors = set()
    for header in metal_cpp.rglob("*.hpp"):
        selectors.update(SELECTOR_DEF.findall(header.read_text(errors="replace")))
    if len(selectors) < 500:   # metal-cpp defines well over a thousand
        sys.exit(f"[check_objc] only {len(selectors)} selectors found in {metal_cpp}: not metal-cpp?")
    return selectors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", type=pathlib.Path,
                        help="files to check (default: cpp/metal/*.mm)")
    parser.add_argument("--syntax-only", action="store_true", help="skip the selector check")
    args = parser.parse_args()
    sources = args.sources or sorted((ROOT / "cpp" / "metal").glob("*.mm"))
    if not sources:
        sys.exit("[check_objc] no cpp/metal/*.mm files to check")
    failed = False
    published = None
    for source in sources:
        errors = sdk_failures(source)
        if errors:
            failed = True
            for sdk, text in errors.items():
                print(f"[check_objc] {source}: syntax/type check against the {sdk} failed:\n{text}",
                      file=sys.stderr)
            continue
        print(f"[check_objc] {source.name}: syntax/type check passed against the {' and the '.join(SDKS)}")
        incomplete = mode_without_functions(source)
        if incomplete:
            failed = True
            print(f"[check_objc] {source}: setMathMode: without setMathFloatingPointFunctions: in "
                  f"{', '.join(incomplete)} (the functions stay Fast)", file=sys.stderr)
        if arc_guard_missing(source):
            failed = True
            print(f"[check_objc] {source}: compiles without ARC; add "
                  f"#if !__has_feature(objc_arc) #error \"... requires ARC ...\"", file=sys.stderr)
        unpooled = unpooled_autoreleased(source)
        if unpooled:
            failed = True
            print(f"[check_objc] {source}: autoreleased results outside an @autoreleasepool block: "
                  f"{', '.join(unpooled)}", file=sys.stderr)
        unchecked = unchecked_nil_results(source)
        if unchecked:
            failed = True
            print(f"[check_objc] {source}: results that may be nil are not tested: "
                  f"{', '.join(unchecked)}", file=sys.stderr)
        if args.syntax_only:
            continue
        published = published or published_selectors(metal_cpp_dir())
        sent = sent_selectors(source)
        unknown = sorted(sent - published)
        if unknown:
            failed = True
            print(f"[check_objc] {source}: selectors not in Apple's Metal/Foundation API "
                  f"(metal-cpp): {', '.join(unknown)}", file=sys.stderr)
        elif not sent:
            failed = True
            print(f"[check_objc] {source}: no selectors found in namespace metalrt::metal", file=sys.stderr)
        else:
            print(f"[check_objc] {source.name}: all {len(sent)} selectors are in metal-cpp")
    if not args.syntax_only and not args.sources:
        if syntax_check(WRONG_SELECTOR_FIXTURE):
            failed = True
            print(f"[check_objc] {WRONG_SELECTOR_FIXTURE} must type-check", file=sys.stderr)
        published = published or published_selectors(metal_cpp_dir())
        fixture_checks = [
            ("selector", sorted(sent_selectors(WRONG_SELECTOR_FIXTURE) - published),
             WRONG_SELECTOR_FIXTURE, ["waitUntilComplete"]),
            ("pool", unpooled_autoreleased(MISSING_POOL_FIXTURE), MISSING_POOL_FIXTURE,
             MISSING_POOL_EXPECTED),
            ("nil", unchecked_nil_results(MISSING_NIL_CHECK_FIXTURE), MISSING_NIL_CHECK_FIXTURE,
             MISSING_NIL_CHECK_EXPECTED),
            ("SDK", sorted(sdk_failures(UNGUARDED_SDK_FIXTURE)), UNGUARDED_SDK_FIXTURE, ["macOS 14 SDK"]),
            ("math", mode_without_functions(FAST_FUNCTIONS_FIXTURE), FAST_FUNCTIONS_FIXTURE,
             FAST_FUNCTIONS_EXPECTED),
        ]
        for check, found, fixture, expected in fixture_checks:
            if found != expected:
                failed = True
                print(f"[check_objc] the {check} check found {found} in {fixture.name}, "
                      f"expected {expected}", file=sys.stderr)
            else:
                print(f"[check_objc] the {check} check flags {fixture.name}'s {', '.join(expected)}, "
                      "only that")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
