# Sourced by the scripts that run Python tools: a virtualenv holding a pinned
# requirements file, made or brought up to date only when the file changed.
#
#   venv_with VENV REQUIREMENTS WHO   (WHO names the caller in its message)
venv_with() {
  local venv=$1 reqs=$2 who=$3 stamp=$1/.rasa-requirements
  if ! [ -x "$venv/bin/python" ] || ! cmp -s "$reqs" "$stamp"; then
    echo "$who: installing $reqs into $venv (pip install -r)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs"
    cp "$reqs" "$stamp"
  fi
}
