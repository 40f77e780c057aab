// Standalone report boot: tabs, and mounting each embedded view on first show (views mounted
// while hidden would measure no size). Runs after uopviz.js defined UOPVIZ. A large state is
// embedded gzip-compressed (base64): the browser's DecompressionStream inflates it; so are large HTML
// blocks and bokeh's JS with the figures' scripts, which run once inflated.
(function () {
  async function stateOf(id) {
    const script = document.getElementById(id);
    if (script.type !== 'application/gzip+base64') return JSON.parse(script.textContent);
    const bytes = Uint8Array.from(atob(script.textContent.trim()), (c) => c.charCodeAt(0));
    const inflated = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return JSON.parse(await new Response(inflated).text());
  }
  // large HTML blocks (kernel sources) and the scripts (bokeh, its figures) are embedded compressed
  async function inflateHtml(el) {
    el.innerHTML = (await stateOf(el.dataset.html)).html;
    el.removeAttribute('data-html');
  }
  async function runScripts() {
    if (!document.getElementById('uv-scripts')) return;
    for (const text of (await stateOf('uv-scripts')).scripts) {
      const script = document.createElement('script');
      script.textContent = text;  // an inline script runs as it is added, in order
      document.head.appendChild(script);
    }
  }
  async function mount(el) {
    el.dataset.mounted = '1';
    UOPVIZ.mountStatic(el, await stateOf(el.dataset.state));
  }
  async function activate(tabs, name) {
    for (const t of tabs.querySelectorAll('.rp-tab')) t.classList.toggle('rp-active', t.dataset.tab === name);
    for (const p of document.querySelectorAll('.rp-panel')) p.classList.toggle('rp-active', p.dataset.tab === name);
    // views mounted while hidden have no size: mount on first show
    const waiting = document.querySelectorAll('.rp-panel.rp-active .uv-mount:not([data-mounted])');
    await Promise.all(Array.from(waiting, mount));
  }
  const tabs = document.querySelector('.rp-tabs');
  for (const t of tabs.querySelectorAll('.rp-tab')) t.addEventListener('click', () => activate(tabs, t.dataset.tab));
  window.UOPVIZ = UOPVIZ;
  const ready = Promise.all([...Array.from(document.querySelectorAll('[data-html]'), inflateHtml), runScripts()]);
  ready.then(() => activate(tabs, tabs.querySelector('.rp-tab').dataset.tab))
    .then(() => { document.body.dataset.ready = '1'; });
})();
