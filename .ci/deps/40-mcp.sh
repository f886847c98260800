# MCP reference servers, the Inspector CLI and the conformance suite (npm,
# Node 20), installed once into $KEEL_CI_CACHE/mcp. Tests find the prefix
# through KEEL_TEST_MCP_DIR (internal/testenv.Dir).
if ! command -v npm >/dev/null 2>&1; then
  echo "ci: installing nodejs and npm"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
mcp_dir="$KEEL_CI_CACHE/mcp"
mcp_pkgs=(
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/sdk@1.32.2
  @modelcontextprotocol/inspector@0.15.0
  @modelcontextprotocol/conformance@0.1.13
)
if [ ! -f "$mcp_dir/.keel-installed-v1" ]; then
  echo "ci: npm install ${mcp_pkgs[*]} into $mcp_dir"
  mkdir -p "$mcp_dir"
  npm install --silent --no-audit --no-fund --prefix "$mcp_dir" "${mcp_pkgs[@]}" >/dev/null
  touch "$mcp_dir/.keel-installed-v1"
fi
export KEEL_TEST_MCP_DIR="$mcp_dir"
