package bash

import (
	"slices"
	"strings"
)

// sendsAlways: network programs whose whole purpose includes sending
// what they read (files, their input, a remote command's input).
var sendsAlways = set("scp", "sftp", "rsync", "nc", "ncat", "netcat", "socat", "telnet", "ftp", "ssh", "mosh", "rclone",
	"gsutil", "aws", "az", "gcloud", "kubectl", "helm")

// curlFileOptions: curl options whose value names a file whose content
// curl sends: always (-T, -K), or when the value starts with @ or holds
// =@ or =< (-d @f, -F a=@f, --data-urlencode n@f, -H @f, -b f without =).
var curlFileOptions = map[string]bool{
	"-d": true, "--data": true, "--data-binary": true, "--data-ascii": true, "--data-urlencode": true, "--json": true,
	"-F": true, "--form": true, "-H": true, "--header": true, "--variable": true, "-b": true, "--cookie": true,
	"-T": true, "--upload-file": true, "-K": true, "--config": true, "--proxy-header": true,
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
		for i, a := range args {
			k, v, hasValue := strings.Cut(a, "=")
			if wgetFileOptions[k] {
				if !hasValue && i+1 < len(args) {
					v = args[i+1]
				}
				return "wget sends the content of " + v
			}
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

// curlSends finds a curl option that sends a file's content.
func curlSends(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		var opt, v string
		switch {
		case strings.HasPrefix(a, "--"):
			k, val, hasValue := strings.Cut(a, "=")
			if !curlFileOptions[k] {
				continue
			}
			opt, v = k, val
			if !hasValue && i+1 < len(args) {
				i++
				v = args[i]
			}
		case strings.HasPrefix(a, "-") && len(a) >= 2:
			k := a[:2]
			if !curlFileOptions[k] {
				continue
			}
			opt, v = k, a[2:]
			if v == "" && i+1 < len(args) {
				i++
				v = args[i]
			}
		default:
			continue
		}
		switch {
		case opt == "-T" || opt == "--upload-file" || opt == "-K" || opt == "--config":
			return "curl sends the content of " + v
		case opt == "-b" || opt == "--cookie":
			if !strings.Contains(v, "=") {
				return "curl sends cookies from the file " + v
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
	}
	return ""
}
