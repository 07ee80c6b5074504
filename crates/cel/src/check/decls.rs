//! The declared overloads of every function a Kubernetes 1.33 CEL expression can call:
//! the table below is transcribed, overload by overload and in source order, from the
//! function declarations that build Kubernetes 1.33's CEL base environment
//! (`k8s.io/apiserver` v0.33.0 `pkg/cel/environment/base.go`, the environment of CRD
//! `x-kubernetes-validations` rules and ValidatingAdmissionPolicy expressions, taken at
//! its "stored expressions" level, i.e. every library introduced up to 1.33 and not
//! removed): cel-go v0.23.2's standard library (`common/stdlib/standard.go`, plus the
//! identical re-declarations `cel.DefaultUTCTimeZone` makes in `cel/library.go`), its
//! optional types library (`cel.OptionalTypes()`, all versions, in `cel/library.go`), its
//! extensions `ext.Strings(ext.StringsVersion(2))` (`ext/strings.go`), `ext.Sets()`
//! (`ext/sets.go`) and `ext.TwoVarComprehensions()` (`ext/comprehensions.go`), and the
//! Kubernetes libraries of `k8s.io/apiserver` v0.33.0 `pkg/cel/library` (`urls.go`,
//! `regex.go`, `lists.go`, `authz.go` with its selectors library, `quantity.go`, `ip.go`,
//! `cidr.go`, `format.go` and `semverlib.go` at `SemverVersion(1)`), whose opaque types
//! are declared in `pkg/cel` (`url.go`, `quantity.go`, `ip.go`, `cidr.go`, `format.go`,
//! `semver.go`) and `pkg/cel/library/authz.go`. Macros, which are expanded by the parser
//! and have no overloads, are listed as comments.

/// One overload per line: the function's name, a space, and its signature as cel-go
/// prints a call's argument types: `(T, ...) -> R` for a global overload,
/// `T0.(T, ...) -> R` for a member overload on a receiver of type `T0`.
/// Lines starting with `#` are comments.
pub(crate) const DECLARATIONS: &str = "
# standard library (common/stdlib/standard.go at cel-go v0.23.2)
# macros (cel/macro.go StandardMacros at cel-go v0.23.2), no overloads:
#   has(e.f)  e.all(x, p)  e.exists(x, p)  e.exists_one(x, p)  e.map(x, t)  e.map(x, p, t)  e.filter(x, p)
_?_:_ (bool, A, A) -> A
_&&_ (bool, bool) -> bool
_||_ (bool, bool) -> bool
!_ (bool) -> bool
@not_strictly_false (bool) -> bool
# (__not_strictly_false__ (bool) -> bool is declared with DisableDeclaration(true): not callable)
_==_ (A, A) -> bool
_!=_ (A, A) -> bool
_+_ (bytes, bytes) -> bytes
_+_ (double, double) -> double
_+_ (google.protobuf.Duration, google.protobuf.Duration) -> google.protobuf.Duration
_+_ (google.protobuf.Duration, google.protobuf.Timestamp) -> google.protobuf.Timestamp
_+_ (google.protobuf.Timestamp, google.protobuf.Duration) -> google.protobuf.Timestamp
_+_ (int, int) -> int
_+_ (list(A), list(A)) -> list(A)
_+_ (string, string) -> string
_+_ (uint, uint) -> uint
_/_ (double, double) -> double
_/_ (int, int) -> int
_/_ (uint, uint) -> uint
_%_ (int, int) -> int
_%_ (uint, uint) -> uint
_*_ (double, double) -> double
_*_ (int, int) -> int
_*_ (uint, uint) -> uint
-_ (double) -> double
-_ (int) -> int
_-_ (double, double) -> double
_-_ (google.protobuf.Duration, google.protobuf.Duration) -> google.protobuf.Duration
_-_ (int, int) -> int
_-_ (google.protobuf.Timestamp, google.protobuf.Duration) -> google.protobuf.Timestamp
_-_ (google.protobuf.Timestamp, google.protobuf.Timestamp) -> google.protobuf.Duration
_-_ (uint, uint) -> uint
# The mixed int/uint/double overloads of _<_, _<=_, _>_, _>=_ below are declared
# unconditionally in standard.go; cel-go's checker (checker/env.go) filters them out unless
# cel.CrossTypeNumericComparisons(true) is set, which base.go does (introduced 1.28).
_<_ (bool, bool) -> bool
_<_ (int, int) -> bool
_<_ (int, double) -> bool
_<_ (int, uint) -> bool
_<_ (uint, uint) -> bool
_<_ (uint, double) -> bool
_<_ (uint, int) -> bool
_<_ (double, double) -> bool
_<_ (double, int) -> bool
_<_ (double, uint) -> bool
_<_ (string, string) -> bool
_<_ (bytes, bytes) -> bool
_<_ (google.protobuf.Timestamp, google.protobuf.Timestamp) -> bool
_<_ (google.protobuf.Duration, google.protobuf.Duration) -> bool
_<=_ (bool, bool) -> bool
_<=_ (int, int) -> bool
_<=_ (int, double) -> bool
_<=_ (int, uint) -> bool
_<=_ (uint, uint) -> bool
_<=_ (uint, double) -> bool
_<=_ (uint, int) -> bool
_<=_ (double, double) -> bool
_<=_ (double, int) -> bool
_<=_ (double, uint) -> bool
_<=_ (string, string) -> bool
_<=_ (bytes, bytes) -> bool
_<=_ (google.protobuf.Timestamp, google.protobuf.Timestamp) -> bool
_<=_ (google.protobuf.Duration, google.protobuf.Duration) -> bool
_>_ (bool, bool) -> bool
_>_ (int, int) -> bool
_>_ (int, double) -> bool
_>_ (int, uint) -> bool
_>_ (uint, uint) -> bool
_>_ (uint, double) -> bool
_>_ (uint, int) -> bool
_>_ (double, double) -> bool
_>_ (double, int) -> bool
_>_ (double, uint) -> bool
_>_ (string, string) -> bool
_>_ (bytes, bytes) -> bool
_>_ (google.protobuf.Timestamp, google.protobuf.Timestamp) -> bool
_>_ (google.protobuf.Duration, google.protobuf.Duration) -> bool
_>=_ (bool, bool) -> bool
_>=_ (int, int) -> bool
_>=_ (int, double) -> bool
_>=_ (int, uint) -> bool
_>=_ (uint, uint) -> bool
_>=_ (uint, double) -> bool
_>=_ (uint, int) -> bool
_>=_ (double, double) -> bool
_>=_ (double, int) -> bool
_>=_ (double, uint) -> bool
_>=_ (string, string) -> bool
_>=_ (bytes, bytes) -> bool
_>=_ (google.protobuf.Timestamp, google.protobuf.Timestamp) -> bool
_>=_ (google.protobuf.Duration, google.protobuf.Duration) -> bool
_[_] (list(A), int) -> A
_[_] (map(A, B), A) -> B
@in (A, list(A)) -> bool
@in (A, map(A, B)) -> bool
# (_in_ and in, with the same two overloads, are declared with DisableDeclaration(true): not callable)
size (bytes) -> int
size bytes.() -> int
size (list(A)) -> int
size list(A).() -> int
size (map(A, B)) -> int
size map(A, B).() -> int
size (string) -> int
size string.() -> int
type (A) -> type(A)
bool (bool) -> bool
bool (string) -> bool
bytes (bytes) -> bytes
bytes (string) -> bytes
double (double) -> double
double (int) -> double
double (string) -> double
double (uint) -> double
duration (google.protobuf.Duration) -> google.protobuf.Duration
duration (int) -> google.protobuf.Duration
duration (string) -> google.protobuf.Duration
dyn (A) -> dyn
int (int) -> int
int (double) -> int
int (google.protobuf.Duration) -> int
int (string) -> int
int (google.protobuf.Timestamp) -> int
int (uint) -> int
string (string) -> string
string (bool) -> string
string (bytes) -> string
string (double) -> string
string (google.protobuf.Duration) -> string
string (int) -> string
string (google.protobuf.Timestamp) -> string
string (uint) -> string
timestamp (google.protobuf.Timestamp) -> google.protobuf.Timestamp
timestamp (int) -> google.protobuf.Timestamp
timestamp (string) -> google.protobuf.Timestamp
uint (uint) -> uint
uint (double) -> uint
uint (int) -> uint
uint (string) -> uint
contains string.(string) -> bool
endsWith string.(string) -> bool
startsWith string.(string) -> bool
matches (string, string) -> bool
matches string.(string) -> bool
# The timestamp/duration getters below are declared again, with the same signatures and
# UTC-defaulting bindings, by cel.DefaultUTCTimeZone(true) (timeUTCLibrary in cel/library.go).
getFullYear google.protobuf.Timestamp.() -> int
getFullYear google.protobuf.Timestamp.(string) -> int
getMonth google.protobuf.Timestamp.() -> int
getMonth google.protobuf.Timestamp.(string) -> int
getDayOfYear google.protobuf.Timestamp.() -> int
getDayOfYear google.protobuf.Timestamp.(string) -> int
getDayOfMonth google.protobuf.Timestamp.() -> int
getDayOfMonth google.protobuf.Timestamp.(string) -> int
getDate google.protobuf.Timestamp.() -> int
getDate google.protobuf.Timestamp.(string) -> int
getDayOfWeek google.protobuf.Timestamp.() -> int
getDayOfWeek google.protobuf.Timestamp.(string) -> int
getHours google.protobuf.Timestamp.() -> int
getHours google.protobuf.Timestamp.(string) -> int
getHours google.protobuf.Duration.() -> int
getMinutes google.protobuf.Timestamp.() -> int
getMinutes google.protobuf.Timestamp.(string) -> int
getMinutes google.protobuf.Duration.() -> int
getSeconds google.protobuf.Timestamp.() -> int
getSeconds google.protobuf.Timestamp.(string) -> int
getSeconds google.protobuf.Duration.() -> int
getMilliseconds google.protobuf.Timestamp.() -> int
getMilliseconds google.protobuf.Timestamp.(string) -> int
getMilliseconds google.protobuf.Duration.() -> int

# optional types library (cel.OptionalTypes() in cel/library.go at cel-go v0.23.2)
# base.go calls cel.OptionalTypes() with no version, so every version (0..2) is included.
# macros, no overloads: e.optMap(x, t) (version 0), e.optFlatMap(x, t) (version 1)
optional.of (V) -> optional_type(V)
optional.ofNonZeroValue (V) -> optional_type(V)
optional.none () -> optional_type(V)
value optional_type(V).() -> V
hasValue optional_type(V).() -> bool
or optional_type(V).(optional_type(V)) -> optional_type(V)
orValue optional_type(V).(V) -> V
# _?._ is special-cased by the type-checker: the result is optional of the selected field's type.
_?._ (dyn, string) -> optional_type(V)
_[?_] (list(V), int) -> optional_type(V)
_[?_] (optional_type(list(V)), int) -> optional_type(V)
_[?_] (map(K, V), K) -> optional_type(V)
_[?_] (optional_type(map(K, V)), K) -> optional_type(V)
_[_] (optional_type(list(V)), int) -> optional_type(V)
_[_] (optional_type(map(K, V)), K) -> optional_type(V)
# version 2
last list(V).() -> optional_type(V)
first list(V).() -> optional_type(V)
optional.unwrap (list(optional_type(V))) -> list(V)
unwrapOpt list(optional_type(V)).() -> list(V)

# strings extension, version 2 (ext.Strings(ext.StringsVersion(2)), ext/strings.go at cel-go v0.23.2)
charAt string.(int) -> string
indexOf string.(string) -> int
indexOf string.(string, int) -> int
lastIndexOf string.(string) -> int
lastIndexOf string.(string, int) -> int
lowerAscii string.() -> string
replace string.(string, string) -> string
replace string.(string, string, int) -> string
split string.(string) -> list(string)
split string.(string, int) -> list(string)
substring string.(int) -> string
substring string.(int, int) -> string
trim string.() -> string
upperAscii string.() -> string
# version 1
format string.(list(dyn)) -> string
strings.quote (string) -> string
# version 2 (versions 0 and 1 declare the same two join overloads with another binding)
join list(string).() -> string
join list(string).(string) -> string
# (reverse is version 3: not in Kubernetes 1.33)

# sets extension (ext.Sets(), ext/sets.go at cel-go v0.23.2)
sets.contains (list(T), list(T)) -> bool
sets.equivalent (list(T), list(T)) -> bool
sets.intersects (list(T), list(T)) -> bool

# two-variable comprehensions (ext.TwoVarComprehensions(), ext/comprehensions.go at cel-go v0.23.2)
# macros, no overloads:
#   e.all(i, v, p)  e.exists(i, v, p)  e.existsOne(i, v, p)  e.exists_one(i, v, p)
#   e.transformList(i, v, t)  e.transformList(i, v, p, t)
#   e.transformMap(k, v, t)  e.transformMap(k, v, p, t)
#   e.transformMapEntry(k, v, t)  e.transformMapEntry(k, v, p, t)
# cel.@mapInsert is the internal function transformMap and transformMapEntry expand to
# (not callable by name from source, as its name is not an identifier).
cel.@mapInsert (map(K, V), K, V) -> map(K, V)
cel.@mapInsert (map(K, V), map(K, V)) -> map(K, V)

# Kubernetes URLs library (pkg/cel/library/urls.go at k8s.io/apiserver v0.33.0)
url (string) -> kubernetes.URL
getScheme kubernetes.URL.() -> string
getHost kubernetes.URL.() -> string
getHostname kubernetes.URL.() -> string
getPort kubernetes.URL.() -> string
getEscapedPath kubernetes.URL.() -> string
getQuery kubernetes.URL.() -> map(string, list(string))
isURL (string) -> bool

# Kubernetes regex library (pkg/cel/library/regex.go at k8s.io/apiserver v0.33.0)
find string.(string) -> string
findAll string.(string) -> list(string)
findAll string.(string, int) -> list(string)

# Kubernetes lists library (pkg/cel/library/lists.go at k8s.io/apiserver v0.33.0)
# isSorted, max and min have one overload per comparable type (int, uint, double, bool,
# duration, timestamp, string, bytes); sum one per summable type (int, uint, double, duration).
isSorted list(int).() -> bool
isSorted list(uint).() -> bool
isSorted list(double).() -> bool
isSorted list(bool).() -> bool
isSorted list(google.protobuf.Duration).() -> bool
isSorted list(google.protobuf.Timestamp).() -> bool
isSorted list(string).() -> bool
isSorted list(bytes).() -> bool
sum list(int).() -> int
sum list(uint).() -> uint
sum list(double).() -> double
sum list(google.protobuf.Duration).() -> google.protobuf.Duration
max list(int).() -> int
max list(uint).() -> uint
max list(double).() -> double
max list(bool).() -> bool
max list(google.protobuf.Duration).() -> google.protobuf.Duration
max list(google.protobuf.Timestamp).() -> google.protobuf.Timestamp
max list(string).() -> string
max list(bytes).() -> bytes
min list(int).() -> int
min list(uint).() -> uint
min list(double).() -> double
min list(bool).() -> bool
min list(google.protobuf.Duration).() -> google.protobuf.Duration
min list(google.protobuf.Timestamp).() -> google.protobuf.Timestamp
min list(string).() -> string
min list(bytes).() -> bytes
indexOf list(A).(A) -> int
lastIndexOf list(A).(A) -> int

# Kubernetes authz library (pkg/cel/library/authz.go at k8s.io/apiserver v0.33.0; introduced 1.27)
# Only reachable through the authorizer and authorizer.requestResource variables of
# ValidatingAdmissionPolicy (pkg/admission/plugin/cel/compile.go).
path kubernetes.authorization.Authorizer.(string) -> kubernetes.authorization.PathCheck
group kubernetes.authorization.Authorizer.(string) -> kubernetes.authorization.GroupCheck
serviceAccount kubernetes.authorization.Authorizer.(string, string) -> kubernetes.authorization.Authorizer
resource kubernetes.authorization.GroupCheck.(string) -> kubernetes.authorization.ResourceCheck
subresource kubernetes.authorization.ResourceCheck.(string) -> kubernetes.authorization.ResourceCheck
namespace kubernetes.authorization.ResourceCheck.(string) -> kubernetes.authorization.ResourceCheck
name kubernetes.authorization.ResourceCheck.(string) -> kubernetes.authorization.ResourceCheck
check kubernetes.authorization.PathCheck.(string) -> kubernetes.authorization.Decision
check kubernetes.authorization.ResourceCheck.(string) -> kubernetes.authorization.Decision
errored kubernetes.authorization.Decision.() -> bool
error kubernetes.authorization.Decision.() -> string
allowed kubernetes.authorization.Decision.() -> bool
reason kubernetes.authorization.Decision.() -> string

# Kubernetes authz selectors library (authzSelectors in pkg/cel/library/authz.go at k8s.io/apiserver v0.33.0)
# introduced 1.31 behind the AuthorizeWithSelectors feature gate (beta, on by default, since 1.32);
# the stored-expressions environment ignores the gate and always has it.
fieldSelector kubernetes.authorization.ResourceCheck.(string) -> kubernetes.authorization.ResourceCheck
labelSelector kubernetes.authorization.ResourceCheck.(string) -> kubernetes.authorization.ResourceCheck

# Kubernetes quantity library (pkg/cel/library/quantity.go at k8s.io/apiserver v0.33.0; introduced 1.28)
quantity (string) -> kubernetes.Quantity
isQuantity (string) -> bool
# sign is declared as a global overload (cel.Overload), although the library's doc comment
# shows <Quantity>.sign(): upstream's checker refuses quantity('1').sign() and accepts sign(q).
sign (kubernetes.Quantity) -> int
isGreaterThan kubernetes.Quantity.(kubernetes.Quantity) -> bool
isLessThan kubernetes.Quantity.(kubernetes.Quantity) -> bool
compareTo kubernetes.Quantity.(kubernetes.Quantity) -> int
asApproximateFloat kubernetes.Quantity.() -> double
asInteger kubernetes.Quantity.() -> int
isInteger kubernetes.Quantity.() -> bool
add kubernetes.Quantity.(kubernetes.Quantity) -> kubernetes.Quantity
add kubernetes.Quantity.(int) -> kubernetes.Quantity
sub kubernetes.Quantity.(kubernetes.Quantity) -> kubernetes.Quantity
sub kubernetes.Quantity.(int) -> kubernetes.Quantity

# Kubernetes IP library (pkg/cel/library/ip.go at k8s.io/apiserver v0.33.0; introduced 1.30)
ip (string) -> net.IP
family net.IP.() -> int
ip.isCanonical (string) -> bool
isUnspecified net.IP.() -> bool
isLoopback net.IP.() -> bool
isLinkLocalMulticast net.IP.() -> bool
isLinkLocalUnicast net.IP.() -> bool
isGlobalUnicast net.IP.() -> bool
isIP (string) -> bool
string (net.IP) -> string

# Kubernetes CIDR library (pkg/cel/library/cidr.go at k8s.io/apiserver v0.33.0; introduced 1.30)
cidr (string) -> net.CIDR
containsIP net.CIDR.(string) -> bool
containsIP net.CIDR.(net.IP) -> bool
containsCIDR net.CIDR.(string) -> bool
containsCIDR net.CIDR.(net.CIDR) -> bool
ip net.CIDR.() -> net.IP
prefixLength net.CIDR.() -> int
masked net.CIDR.() -> net.CIDR
isCIDR (string) -> bool
string (net.CIDR) -> string

# Kubernetes format library (pkg/cel/library/format.go at k8s.io/apiserver v0.33.0; introduced 1.31)
validate kubernetes.NamedFormat.(string) -> optional_type(list(string))
format.named (string) -> optional_type(kubernetes.NamedFormat)
# one zero-argument function per entry of ConstantFormats, named format.<key>
format.dns1123Label () -> kubernetes.NamedFormat
format.dns1123Subdomain () -> kubernetes.NamedFormat
format.dns1035Label () -> kubernetes.NamedFormat
format.qualifiedName () -> kubernetes.NamedFormat
format.dns1123LabelPrefix () -> kubernetes.NamedFormat
format.dns1123SubdomainPrefix () -> kubernetes.NamedFormat
format.dns1035LabelPrefix () -> kubernetes.NamedFormat
format.labelValue () -> kubernetes.NamedFormat
format.uri () -> kubernetes.NamedFormat
format.uuid () -> kubernetes.NamedFormat
format.byte () -> kubernetes.NamedFormat
format.date () -> kubernetes.NamedFormat
format.datetime () -> kubernetes.NamedFormat

# Kubernetes semver library (pkg/cel/library/semverlib.go at k8s.io/apiserver v0.33.0)
# introduced 1.33 as library.SemverLib(library.SemverVersion(1)); 1.33's default
# compatibility version (1.32) leaves it out of the new-expressions environment, but
# stored expressions (and a 1.33 compatibility version) have it.
semver (string) -> kubernetes.Semver
isSemver (string) -> bool
isGreaterThan kubernetes.Semver.(kubernetes.Semver) -> bool
isLessThan kubernetes.Semver.(kubernetes.Semver) -> bool
compareTo kubernetes.Semver.(kubernetes.Semver) -> int
major kubernetes.Semver.() -> int
minor kubernetes.Semver.() -> int
patch kubernetes.Semver.() -> int
# version 1
semver (string, bool) -> kubernetes.Semver
isSemver (string, bool) -> bool

# Not in the CRD / ValidatingAdmissionPolicy environments, listed for reference only:
# Kubernetes JSONPatch library (pkg/cel/library/jsonpatch.go at k8s.io/apiserver v0.33.0) is
# added only to MutatingAdmissionPolicy's patch environments (hasPatchTypes in
# pkg/admission/plugin/cel/compile.go):
#   jsonpatch.escapeKey (string) -> string
# pkg/cel/library/test.go declares a test-only library used by no environment.
";
