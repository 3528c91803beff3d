// The API docs page (templates/api/docs.html): Swagger UI whose requests to this server carry the CSRF token
// of the signed-in session and the team chosen at the top of the page. Nothing is sent to any other origin.
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("swagger-settings").textContent);
  var team = document.getElementById("mas-docs-team");

  function cookie(name) {
    var found = document.cookie.split("; ").filter(function (part) { return part.indexOf(name + "=") === 0; })[0];
    return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
  }

  function sameOrigin(url) {
    try { return new URL(url, window.location.href).origin === window.location.origin; } catch (error) { return false; }
  }

  function hasHeader(headers, name) {
    return Object.keys(headers || {}).some(function (key) {
      return key.toLowerCase() === name.toLowerCase() && String(headers[key]).trim() !== "";
    });
  }

  config.dom_id = "#swagger-ui";
  config.presets = [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset];
  config.requestInterceptor = function (request) {
    if (!sameOrigin(request.url)) return request;
    request.headers = request.headers || {};
    // The cookie's value is the current one even after a sign-in in another tab; the page's is the fallback.
    var token = cookie("csrftoken") || document.body.dataset.csrfToken;
    if (token) request.headers["X-CSRFToken"] = token;
    if (team && team.value && !hasHeader(request.headers, "X-MAS-Team")) request.headers["X-MAS-Team"] = team.value;
    return request;
  };
  window.ui = SwaggerUIBundle(config);
})();
