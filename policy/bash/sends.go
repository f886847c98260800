package bash

import (
	"path"
	"slices"
	"strings"
)

// sendsAlways: network programs whose whole purpose includes sending
// what they read (files, their input, a remote command's input).
var sendsAlways = set("scp", "sftp", "rsync", "nc", "ncat", "netcat", "socat", "telnet", "ftp", "ssh", "mosh", "rclone",
	"gsutil", "aws", "az", "gcloud", "kubectl", "helm")

// curlFileOptions: curl options whose value names a file whose content
// curl sends: always (-T, -K, --netrc-file), or when the value starts
// with @ or holds =@ or =< (-d @f, -F a=@f, --data-urlencode n@f,
// --url-query n@f, -H @f, -b f without =).
var curlFileOptions = map[string]bool{
	"-d": true, "--data": true, "--data-binary": true, "--data-ascii": true, "--data-urlencode": true, "--json": true,
	"-F": true, "--form": true, "-H": true, "--header": true, "--variable": true, "-b": true, "--cookie": true,
	"-T": true, "--upload-file": true, "-K": true, "--config": true, "--proxy-header": true, "--url-query": true,
	"--netrc-file": true,
}

// curlShortValue: curl's one-letter options that take a value (in a
// cluster, the rest of the word or the next word is the value: -sd@f).
const curlShortValue = "AbcCdDeEFHKmoPQrtTuUwxXyYz"

// curlLongValue: curl's long options that take a value and are not in
// curlFileOptions (so that a value is not taken for an option).
var curlLongValue = set("--max-redirs", "--parallel-max", "--keepalive-time", "--cert-type", "--key-type", "--proxy-key", "--proxy-cert-type", "--noproxy", "--output", "-o", "--user", "--user-agent", "--referer", "--request", "--proxy", "--max-time", "--connect-timeout",
	"--write-out", "--cookie-jar", "--dump-header", "--range", "--cert", "--key", "--cacert", "--capath", "--resolve", "--connect-to",
	"--retry", "--retry-delay", "--retry-max-time", "--max-filesize", "--limit-rate", "--interface", "--unix-socket", "--abstract-unix-socket",
	"--data-raw", "--form-string", "--proxy-user", "--continue-at", "--time-cond", "--speed-time", "--speed-limit", "--url",
	"--trace", "--trace-ascii", "--stderr", "--output-dir", "--expect100-timeout", "--happy-eyeballs-timeout-ms", "--local-port",
	"--dns-servers", "--doh-url", "--preproxy", "--proxy-cacert", "--proxy-cert", "--ciphers", "--tls-max", "--quote", "--telnet-option",
	"--ftp-port", "--mail-from", "--mail-rcpt", "--oauth2-bearer", "--aws-sigv4", "--hsts", "--alt-svc", "--create-file-mode")

// curlFlags: curl's options without a value that send nothing beyond
// the command's words. An option in none of curlFlags, curlLongValue,
// curlShortValue and curlFileOptions is one Keel does not know, and so
// may send more than its words (a config, a certificate, a variable
// from the environment).
var curlFlags = set("-s", "--silent", "-S", "--show-error", "-f", "--fail", "--fail-with-body", "--fail-early", "-L", "--location",
	"--location-trusted", "-k", "--insecure", "-v", "--verbose", "-i", "--include", "--show-headers", "-I", "--head", "-O", "--remote-name",
	"--remote-name-all", "-J", "--remote-header-name", "-g", "--globoff", "-G", "--get", "-4", "--ipv4", "-6", "--ipv6", "-N", "--no-buffer",
	"-0", "--http1.0", "--http1.1", "--http2", "--http2-prior-knowledge", "--http3", "--http3-only", "-j", "--junk-session-cookies",
	"-l", "--list-only", "-R", "--remote-time", "-#", "--progress-bar", "--compressed", "--no-progress-meter", "-Z", "--parallel",
	"--parallel-immediate", "--create-dirs", "--no-keepalive", "--tcp-nodelay", "--tcp-fastopen", "--ssl", "--ssl-reqd", "-1", "--tlsv1",
	"--tlsv1.0", "--tlsv1.1", "--tlsv1.2", "--tlsv1.3", "-2", "-3", "--post301", "--post302", "--post303", "--raw", "--styled-output",
	"--no-styled-output", "--retry-all-errors", "--retry-connrefused", "--path-as-is", "-p", "--proxytunnel", "-q", "--disable",
	"--trace-time", "--no-sessionid", "--no-alpn", "--no-npn", "--no-clobber", "--remove-on-error", "--ssl-no-revoke", "--digest",
	"--basic", "--anyauth", "--ignore-content-length", "--suppress-connect-headers", "--disallow-username-in-url", "-h", "--help",
	"-V", "--version", "-:", "--next", "-a", "--append", "-B", "--use-ascii", "--crlf")

// curlPresents: curl options whose value names a file curl presents to
// the server (a client certificate: its fields reach the server).
var curlPresents = set("-E", "--cert", "--key", "--proxy-cert", "--proxy-key")

// curlOptions lists curl's options with their values, as curl reads
// its arguments: long options (--opt v, --opt=v), clusters of short
// ones (-sSd @f, -sd@f); "--" ends the options.
func curlOptions(args []string) (opts []string, values []string) {
	// --expand-data {{var}} is --data with variables (which --variable
	// sets and curlOptionSend checks).
	base := func(k string) string {
		if x, ok := strings.CutPrefix(k, "--expand-"); ok {
			return "--" + x
		}
		return k
	}
	opts, values = getopt(args, func(k string) bool { return curlFileOptions[base(k)] || curlLongValue[base(k)] }, curlShortValue, false)
	for i := range opts {
		opts[i] = base(opts[i])
	}
	return opts, values
}

// getopt lists a program's options with their values, as GNU getopt
// reads them: a long option takes the next word as its value when
// longValue says it has one and it has no =v; in a cluster of short
// ones, the first letter of shortValue takes the rest of the word or the
// next word; with twoLetterN, -n and the letter after it are one option
// (wget's -nv, -nc); "--" ends the options.
func getopt(args []string, longValue func(string) bool, shortValue string, twoLetterN bool) (opts []string, values []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return
		case strings.HasPrefix(a, "--"):
			k, v, hasValue := strings.Cut(a, "=")
			if longValue(k) && !hasValue && i+1 < len(args) {
				i++
				v = args[i]
			}
			opts, values = append(opts, k), append(values, v)
		case strings.HasPrefix(a, "-") && len(a) >= 2:
			for j := 1; j < len(a); j++ {
				c := a[j : j+1]
				if twoLetterN && c == "n" && j+1 < len(a) {
					opts, values = append(opts, "-n"+a[j+1:j+2]), append(values, "")
					j++
					continue
				}
				if !strings.Contains(shortValue, c) {
					opts, values = append(opts, "-"+c), append(values, "")
					continue
				}
				v := a[j+1:]
				if v == "" && i+1 < len(args) {
					i++
					v = args[i]
				}
				opts, values = append(opts, "-"+c), append(values, v)
				break
			}
		}
	}
	return
}

// wgetFileOptions: wget options whose value names a file whose content
// wget sends (a body, or the URLs it requests).
var wgetFileOptions = set("--post-file", "--body-file", "-i", "--input-file", "--load-cookies")

// wgetFlags: wget's options without a value that send nothing beyond
// the command's words; wgetValue: those with a value (given with = or
// as the next word) that send nothing beyond it. Any other option (-e,
// --execute: any wgetrc command; --config; --certificate) is one Keel
// does not know to be harmless.
var (
	wgetFlags = set("-V", "--version", "-h", "--help", "-d", "--debug", "-q", "--quiet", "-v", "--verbose", "-nv", "--no-verbose",
		"-S", "--server-response", "--spider", "--no-check-certificate", "-c", "--continue", "-N", "--timestamping", "-nc",
		"--no-clobber", "-4", "--inet4-only", "-6", "--inet6-only", "-r", "--recursive", "-np", "--no-parent", "-nd",
		"--no-directories", "-nH", "--no-host-directories", "-k", "--convert-links", "-K", "--backup-converted", "-p",
		"--page-requisites", "-E", "--adjust-extension", "--no-proxy", "--retry-connrefused", "--retry-on-host-error",
		"--content-disposition", "--show-progress", "--https-only", "-x", "--force-directories", "--no-config", "-m", "--mirror",
		"--no-cookies", "--ignore-case", "--no-dns-cache", "--no-http-keep-alive", "--trust-server-names", "-H", "--span-hosts",
		"--no-cache", "--random-wait", "-L", "--relative", "--no-hsts", "--unlink", "--delete-after", "--no-if-modified-since",
		"--save-headers", "--auth-no-challenge")
	wgetValue = set("-O", "--output-document", "-o", "--output-file", "-a", "--append-output", "-P", "--directory-prefix", "-t",
		"--tries", "-T", "--timeout", "--dns-timeout", "--connect-timeout", "--read-timeout", "--header", "-U", "--user-agent",
		"--method", "--body-data", "--post-data", "--ca-certificate", "--ca-directory", "--user", "--password", "--http-user",
		"--http-password", "--max-redirect", "-l", "--level", "--cut-dirs", "--limit-rate", "-w", "--wait", "--waitretry",
		"--progress", "-B", "--base", "--referer", "-Q", "--quota", "-A", "--accept", "-R", "--reject", "-D", "--domains",
		"--exclude-domains", "-I", "--include-directories", "-X", "--exclude-directories", "--default-page",
		"--restrict-file-names", "--compression", "--local-encoding", "--remote-encoding")
)

// wgetShortValue: wget's one-letter options that take a value (in a
// cluster, the rest of the word or the next word).
const wgetShortValue = "eoaiBtOTwQPlADRIXUCY"

// wgetOptions lists wget's options with their values, as GNU getopt
// reads them: --opt v, --opt=v, clusters of short ones (-qO-), the
// two-letter -n forms (-nv, -nc); "--" ends the options.
func wgetOptions(args []string) (opts []string, values []string) {
	return getopt(args, func(k string) bool { return wgetValue[k] || wgetFileOptions[k] || k == "--execute" || k == "--config" }, wgetShortValue, true)
}

// wgetNetrcOff reports whether wget's options turn off ~/.netrc, which
// wget otherwise reads to answer a server's request for credentials.
func wgetNetrcOff(opts, values []string) bool {
	for i, o := range opts {
		if (o == "-e" || o == "--execute") && strings.ReplaceAll(strings.ToLower(values[i]), " ", "") == "netrc=off" {
			return true
		}
	}
	return false
}

// harmlessEnv reports whether setting the environment variable name for
// a network program cannot make it send more than its words.
func harmlessEnv(name string) bool {
	switch name {
	case "LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR", "COLUMNS", "LINES":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// wordsOnly: network programs that send nothing but their words (the
// names and addresses they ask about).
var wordsOnly = set("ping", "ping6", "dig", "nslookup", "host", "whois")

// sends says what a network command sends besides the words of its
// command line: the content of a file or of its input ("" when it sends
// only what its words show). The caller knows the command uses the
// network.
func sends(c *Command, name string, args []string) string {
	if sendsAlways[name] {
		return name + " sends files or its input"
	}
	if name == "git" && c.Subcommand() == "push" {
		return "git push sends the repository's commits"
	}
	switch name {
	case "curl", "wget", "http", "https", "xh":
		// "$(cat notes.txt)" sends the file as -d @notes.txt does.
		lits := c.Literal[min(c.Prog+1, len(c.Literal)):]
		for i, a := range args {
			if i < len(lits) && !lits[i] && (strings.Contains(a, "$(") || strings.Contains(a, "`") || strings.Contains(a, "<(")) {
				return name + " sends the output of a command substitution: " + a
			}
		}
	}
	switch name {
	case "curl", "wget":
		for _, a := range c.Assigns {
			if !harmlessEnv(a) {
				return name + " runs with " + a + " set, which may make it load code or read a file an earlier command wrote (LD_PRELOAD, CURL_HOME, WGETRC)"
			}
		}
		if name == "curl" {
			return curlSends(args)
		}
		return wgetSends(args)
	case "http", "https", "xh":
		// HTTPie: name=@file, name:=@file and @file send a file; a
		// redirected or piped input is the body.
		for _, a := range args {
			if strings.HasPrefix(a, "@") || strings.Contains(a, "=@") {
				return name + " sends the content of a file: " + a
			}
		}
		if c.Input || slices.ContainsFunc(c.Redirects, func(r Redirect) bool { return r.Op == "<" || r.Op == "<<<" }) {
			return name + " sends its input"
		}
		return name + " reads its config file (default options) and ~/.netrc, which an earlier command may have written"
	case "git":
		return "git reads configuration an earlier command may have written (~/.gitconfig, a repository's .git/config: credential helpers, http.extraHeader, url.insteadOf), ~/.netrc and the environment (GIT_ASKPASS), so it may send more than its words"
	}
	if wordsOnly[name] {
		return ""
	}
	return name + " reads configuration or runs programs an earlier command may have written (in HOME, /tmp or the workspace), so it may send more than its words"
}

// curlSends finds a curl option that sends a file's content, and says
// that curl reads its config file (~/.curlrc, which an earlier command
// may have written: url-query = "@/proc/self/environ") unless told not
// to (-q first).
func curlSends(args []string) string {
	opts, values := curlOptions(args)
	if s := curlOptionSends(opts, values); s != "" {
		return s
	}
	if len(args) == 0 || (args[0] != "-q" && args[0] != "--disable") {
		return "curl reads its config file (~/.curlrc, $CURL_HOME/.curlrc), which an earlier command may have written"
	}
	return ""
}

// curlOptionSends says which of opts (with values) makes curl send a
// file's content ("" none).
func curlOptionSends(opts, values []string) string {
	for i := range opts {
		if s := curlOptionSend(opts[i], values[i]); s != "" {
			return s
		}
	}
	return ""
}

// curlSending counts the options of opts that send a file's content.
func curlSending(opts, values []string) int {
	n := 0
	for i := range opts {
		if curlOptionSend(opts[i], values[i]) != "" {
			n++
		}
	}
	return n
}

// curlOptionSend says what option opt with value v sends besides its
// words ("" nothing).
func curlOptionSend(opt, v string) string {
	switch {
	case opt == "-n" || opt == "--netrc" || opt == "--netrc-optional":
		return "curl sends credentials from ~/.netrc"
	case curlPresents[opt]:
		return "curl presents the certificate or key in " + v + " to the server"
	case opt == "--variable" && strings.HasPrefix(v, "%"):
		return "curl reads the environment variable " + strings.TrimPrefix(v, "%")
	case !curlFileOptions[opt] && !curlFlags[opt] && !curlLongValue[opt] && !(len(opt) == 2 && strings.Contains(curlShortValue, opt[1:])):
		return "curl option " + opt + " is not one Keel knows to send nothing beyond its words"
	case !curlFileOptions[opt]:
		return ""
	case opt == "-T" || opt == "--upload-file" || opt == "-K" || opt == "--config" || opt == "--netrc-file":
		return "curl sends the content of " + v
	case opt == "-b" || opt == "--cookie":
		if !strings.Contains(v, "=") {
			return "curl sends cookies from the file " + v
		}
	case opt == "--url-query":
		// [+][name]@file, [+][name=]content.
		q := strings.TrimPrefix(v, "+")
		if n, f, ok := strings.Cut(q, "@"); ok && !strings.Contains(n, "=") {
			return "curl sends the content of " + f
		}
	case strings.HasPrefix(v, "@"):
		return "curl sends the content of " + strings.TrimPrefix(v, "@")
	case strings.Contains(v, "=@") || strings.Contains(v, "=<"):
		return "curl sends the content of a file: " + v
	case opt == "--data-urlencode" || opt == "--variable":
		if n, f, ok := strings.Cut(v, "@"); ok && !strings.Contains(n, "=") {
			return "curl sends the content of " + f
		}
	}
	return ""
}

// SendsBeyond reports whether the words of a command after its first n
// make a network program send a file's content (curl -d @f, wget
// --post-file f): a remembered prefix covers the words that follow it
// only when they send nothing more than they show. command is the
// program as written, words its literal words from argv[0] on.
func SendsBeyond(command string, words []string, n int) bool {
	if len(words) <= n {
		return false
	}
	name := path.Base(command)
	if name == "." || name == "/" || name == "" {
		name = path.Base(words[0])
	}
	rest := words[n:]
	switch name {
	case "curl":
		// The options of the whole line: a value may follow its option
		// across the prefix's end.
		// More options that send than the prefix has (a value may follow
		// its option across the prefix's end: prefix "curl -d").
		return curlSending(curlOptions(words[1:])) > curlSending(curlOptions(words[1:n]))
	case "wget":
		opts, values := wgetOptions(rest)
		return wgetOptionSends(opts, values) != ""
	case "http", "https", "xh":
		return slices.ContainsFunc(rest, func(a string) bool { return strings.HasPrefix(a, "@") || strings.Contains(a, "=@") })
	}
	return false
}

// wgetSends says what wget sends beyond its words: a file's content
// (--post-file, -i), what an option Keel does not know may send (-e,
// --config), its config file (~/.wgetrc, unless --no-config) or
// credentials from ~/.netrc (unless -e netrc=off); "" nothing.
func wgetSends(args []string) string {
	opts, values := wgetOptions(args)
	if s := wgetOptionSends(opts, values); s != "" {
		return s
	}
	if !slices.Contains(opts, "--no-config") {
		return "wget reads its config file (~/.wgetrc, $WGETRC), which an earlier command may have written"
	}
	if !wgetNetrcOff(opts, values) {
		return "wget sends credentials from ~/.netrc (which an earlier command may have written) when a server asks; add -e netrc=off"
	}
	return ""
}

// wgetOptionSends says which of opts (with values) makes wget send more
// than its words ("" none).
func wgetOptionSends(opts, values []string) string {
	for i, o := range opts {
		switch {
		case wgetFileOptions[o]:
			return "wget sends the content of " + values[i]
		case (o == "-e" || o == "--execute") && strings.ReplaceAll(strings.ToLower(values[i]), " ", "") == "netrc=off":
		case !wgetFlags[o] && !wgetValue[o]:
			return "wget option " + o + " is not one Keel knows to send nothing beyond its words"
		}
	}
	return ""
}
