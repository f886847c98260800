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
var curlLongValue = set("--output", "-o", "--user", "--user-agent", "--referer", "--request", "--proxy", "--max-time", "--connect-timeout",
	"--write-out", "--cookie-jar", "--dump-header", "--range", "--cert", "--key", "--cacert", "--capath", "--resolve", "--connect-to",
	"--retry", "--retry-delay", "--retry-max-time", "--max-filesize", "--limit-rate", "--interface", "--unix-socket", "--abstract-unix-socket",
	"--data-raw", "--form-string", "--proxy-user", "--continue-at", "--time-cond", "--speed-time", "--speed-limit", "--url",
	"--trace", "--trace-ascii", "--stderr", "--output-dir", "--expect100-timeout", "--happy-eyeballs-timeout-ms", "--local-port",
	"--dns-servers", "--doh-url", "--preproxy", "--proxy-cacert", "--proxy-cert", "--ciphers", "--tls-max", "--quote", "--telnet-option",
	"--ftp-port", "--mail-from", "--mail-rcpt", "--oauth2-bearer", "--aws-sigv4", "--hsts", "--alt-svc", "--create-file-mode")

// curlOptions lists curl's options with their values, as curl reads
// its arguments: long options (--opt v, --opt=v), clusters of short
// ones (-sSd @f, -sd@f); "--" ends the options.
func curlOptions(args []string) (opts []string, values []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return
		case strings.HasPrefix(a, "--"):
			k, v, hasValue := strings.Cut(a, "=")
			if (curlFileOptions[k] || curlLongValue[k]) && !hasValue && i+1 < len(args) {
				i++
				v = args[i]
			}
			opts, values = append(opts, k), append(values, v)
		case strings.HasPrefix(a, "-") && len(a) >= 2:
			for j := 1; j < len(a); j++ {
				k := "-" + a[j:j+1]
				if !strings.Contains(curlShortValue, a[j:j+1]) {
					opts, values = append(opts, k), append(values, "")
					continue
				}
				v := a[j+1:]
				if v == "" && i+1 < len(args) {
					i++
					v = args[i]
				}
				opts, values = append(opts, k), append(values, v)
				break
			}
		}
	}
	return
}

// wgetFileOptions: wget options whose value names a file whose content
// wget sends (a body, or the URLs it requests).
var wgetFileOptions = set("--post-file", "--body-file", "-i", "--input-file", "--load-cookies")

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
	case "curl":
		return curlSends(args)
	case "wget":
		if s := wgetSends(args); s != "" {
			return s
		}
		if !slices.Contains(args, "--no-config") {
			return "wget reads its config file (~/.wgetrc, $WGETRC), which an earlier command may have written"
		}
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
	}
	return ""
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
		return wgetSends(rest) != ""
	case "http", "https", "xh":
		return slices.ContainsFunc(rest, func(a string) bool { return strings.HasPrefix(a, "@") || strings.Contains(a, "=@") })
	}
	return false
}

// wgetSends finds a wget option that sends a file's content.
func wgetSends(args []string) string {
	for i, a := range args {
		k, v, hasValue := strings.Cut(a, "=")
		if !wgetFileOptions[k] && strings.HasPrefix(a, "-i") && len(a) > 2 && !strings.HasPrefix(a, "--") {
			k, v, hasValue = "-i", a[2:], true // -iFILE
		}
		if wgetFileOptions[k] {
			if !hasValue && i+1 < len(args) {
				v = args[i+1]
			}
			return "wget sends the content of " + v
		}
	}
	return ""
}
