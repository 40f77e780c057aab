// Standalone report boot: tabs, and mounting each embedded view on first show (views mounted
// while hidden would measure no size). Runs after uopviz.js defined UOPVIZ.
(function () {
  function activate(tabs, name) {
    for (const t of tabs.querySelectorAll('.rp-tab')) t.classList.toggle('rp-active', t.dataset.tab === name);
    for (const p of document.querySelectorAll('.rp-panel')) p.classList.toggle('rp-active', p.dataset.tab === name);
    // views mounted while hidden have no size: mount on first show
    for (const el of document.querySelectorAll('.rp-panel.rp-active .uv-mount:not([data-mounted])')) mount(el);
  }
  function mount(el) {
    const state = JSON.parse(document.getElementById(el.dataset.state).textContent);
    el.dataset.mounted = '1';
    UOPVIZ.mountStatic(el, state);
  }
  const tabs = document.querySelector('.rp-tabs');
  for (const t of tabs.querySelectorAll('.rp-tab')) t.addEventListener('click', () => activate(tabs, t.dataset.tab));
  activate(tabs, tabs.querySelector('.rp-tab').dataset.tab);
  window.UOPVIZ = UOPVIZ;
  document.body.dataset.ready = '1';
})();
